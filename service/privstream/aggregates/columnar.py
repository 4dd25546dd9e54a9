"""``Accumulator`` a batch at a time: the same records kept, the same totals and partial.

``ColumnAccumulator.add_all`` reads a batch's cells, values, correlated
groups and subjects as arrays (``columns``), numbers the subjects and
bounds them in C (``bounding``, ``_bounds.c``: each unit's first records in
input order, as ``Accumulator``), and adds the kept records' counts and sums per cell, the
cells in the order of their first kept record (so the partial's cells come
in ``Accumulator``'s order and ``windows.encode_partial`` writes the same
bytes). ``Accumulator`` stays the record-at-a-time path of ``OpenWindows``;
``tests/unit/aggregates/test_columnar.py`` checks the two agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from privstream.aggregates import _bounds, columns
from privstream.aggregates.bounding import HashRows, Ints, SubjectBounds, first_records
from privstream.aggregates.partial import FROM_RECORD, Bounds, Partial, Subject, vector_totals
from privstream.aggregates.read import Cell, RecordReader, identity_of
from privstream.errors import MisuseError
from privstream.pipeline.subjects import canonical_subject

#: int64 sums of at most this many grid values of up to ``2^50`` (``MAX_GRID_INDEX``)
_SUM_CHUNK = 1 << 12


class UnitIds:
    """Ids of canonical subjects (or of other units' bytes), None's -1: shared by the
    accumulators of one window, a batch's subjects are looked up once for all of them."""

    def __init__(self) -> None:
        self._units: list[bytes] = []  # by id
        self._table = HashRows()  # (hash, id) per unit (``_bounds.intern``)

    def __len__(self) -> int:
        return len(self._units)

    def of(self, units: Sequence[bytes | None]) -> Ints:
        """Each unit's id, a new one taking the next (one C loop)."""
        ids = np.empty(len(units), np.int64)
        self._table.room(len(self._units), len(units))
        _bounds.intern(self._table.rows, self._units, units, ids, self._table.mix)
        return ids


class ColumnAccumulator:
    """Sums one aggregate's records of one window a batch at a time (``Accumulator``)."""

    def __init__(
        self,
        name: str,
        window: str,
        reader: RecordReader,
        bounds: Bounds,
        subject_ids: UnitIds | None = None,
    ) -> None:
        self.name = name
        self.window = window
        self._reader = reader
        self._bounds = bounds
        self._counts: dict[Cell, int] = {}
        self._sums: dict[Cell, int] = {}
        self._cell_ids: dict[Cell, int] = {}
        self._subject_ids = UnitIds() if subject_ids is None else subject_ids
        self._group_ids = UnitIds()
        self._group_kept = np.zeros(0, np.int64)
        groups, records = bounds.groups_per_subject, bounds.records_per_group
        self._subjects = None
        if groups is not None and records is not None:
            self._subjects = SubjectBounds(groups, records)

    def add_all(
        self,
        records: Iterable[Mapping[str, Any]] | columns.Batch,
        subjects: Iterable[Subject] | Ints | None = None,
    ) -> None:
        """Count the records the aggregate reads and the bounds admit, in input order;
        ``subjects`` as ``Accumulator.add_all``'s (read from each record if None), or their
        ids in the ``UnitIds`` the accumulator was made with. The window's accumulators
        share a ``Batch`` and the ids: each field and subject is read once."""
        batch = records if isinstance(records, columns.Batch) else columns.Batch(records)
        reader = self._reader
        codes, cells = columns.cell_codes(reader, batch)
        chosen = np.flatnonzero(codes >= 0)
        values = np.zeros(len(batch), np.float64)
        if reader.value_field is not None:
            values, readable = batch.numbers(reader.value_field)
            chosen = chosen[readable[chosen]]
        if self._bounds.max_group is not None:
            chosen = self._correlated(batch, chosen, self._bounds.max_group)
        if self._subjects is not None:
            if not isinstance(subjects, np.ndarray):
                given = _subjects(batch.records, subjects, self._reader.subject)
                subjects = self._subject_ids.of(given)
            chosen = self._bounded(self._subjects, subjects, chosen, codes, cells)
        self._tally(chosen, codes[chosen], cells, values[chosen])

    def _correlated(self, batch: columns.Batch, chosen: Ints, limit: int) -> Ints:
        """The records whose correlated group (``by``'s value) has room left for them."""
        by = self._reader.correlated_by
        units: list[bytes | None] = [b""] * len(chosen)  # no field: one group (``identity``)
        if by is not None:
            values = batch.column(by)
            units = [identity_of(values[i]) for i in chosen.tolist()]
        ids = self._group_ids.of(units)
        self._group_kept = _grown(self._group_kept, len(self._group_ids))
        admitted, self._group_kept = first_records(ids[ids >= 0], self._group_kept, limit)
        return chosen[ids >= 0][admitted]

    def _bounded(
        self,
        bounds: SubjectBounds,
        subjects: Ints,
        chosen: Ints,
        codes: Ints,
        cells: list[Cell],
    ) -> Ints:
        """The records their subject's bounds admit (``SubjectBounds``); no subject: none."""
        _one_each(len(subjects), len(codes))
        chosen = chosen[subjects[chosen] >= 0]
        owners = subjects[chosen]
        # the window's cell ids, of the cells a subject may keep only
        used, _ = columns.renumbered(codes[chosen], len(cells))
        ids = np.full(len(cells), -1, np.int64)
        known = self._cell_ids
        ids[used] = [known.setdefault(cells[i], len(known)) for i in used.tolist()]
        verdicts = bounds.admit(owners, ids[codes[chosen]], len(self._subject_ids))
        return chosen[verdicts]

    def _tally(self, kept: Ints, codes: Ints, cells: list[Cell], values: Any) -> None:
        """Add the kept records per cell, cells in the order of their first kept record."""
        distinct, where = columns.renumbered(codes, len(cells))
        first = np.full(len(distinct), len(codes), np.int64)
        np.minimum.at(first, where, np.arange(len(codes)))
        order = np.argsort(first).tolist()  # first kept records: distinct positions
        counts = np.bincount(where, minlength=len(distinct)).tolist()
        for u in order:
            cell = cells[int(distinct[u])]
            self._counts[cell] = self._counts.get(cell, 0) + counts[u]
        reader = self._reader
        if reader.vector is not None:
            for u in order:
                totals = vector_totals(reader.vector, values[where == u].tolist())
                for j, total in enumerate(totals):
                    key = (*cells[int(distinct[u])], j)
                    self._sums[key] = self._sums.get(key, 0) + total
        elif reader.value_field is not None:
            sums = _exact_sums(where, columns.grid_values(reader, values), len(distinct))
            for u in order:
                cell = cells[int(distinct[u])]
                self._sums[cell] = self._sums.get(cell, 0) + sums[u]

    def partial(self) -> Partial:
        return Partial(self.name, self.window, dict(self._counts), dict(self._sums))


def _subjects(
    batch: Sequence[Mapping[str, Any]], subjects: Iterable[Subject] | None, name: str | None
) -> list[bytes | None]:
    """Each record's canonical subject: given, or read from the record (``FROM_RECORD``)."""
    given = list(subjects) if subjects is not None else [FROM_RECORD] * len(batch)
    _one_each(len(given), len(batch))
    return [
        (None if name is None else canonical_subject(record.get(name)))
        if subject is FROM_RECORD
        else subject
        for record, subject in zip(batch, given, strict=True)
    ]


def _one_each(subjects: int, records: int) -> None:
    if subjects != records:
        raise MisuseError(f"{subjects} subjects for {records} records: give one per record")


def _grown(kept: Ints, size: int) -> Ints:
    return np.concatenate([kept, np.zeros(max(0, size - len(kept)), np.int64)])


def _exact_sums(where: Ints, values: Ints, size: int) -> list[int]:
    """Per index of ``where``, the sum of its values, as exact integers."""
    totals = [0] * size
    for start in range(0, len(values), _SUM_CHUNK):
        chunk = np.zeros(size, np.int64)
        np.add.at(chunk, where[start : start + _SUM_CHUNK], values[start : start + _SUM_CHUNK])
        totals = [a + b for a, b in zip(totals, chunk.tolist(), strict=True)]
    return totals

"""Partial sums per (aggregate, window, cell) that merge associatively, and how they are made.

A ``Partial`` holds, per cell, the count of the records kept and the sum of
their grid values (a density: per cell and grid point ``j``, under the key
``cell + (j,)``, the sum of the records' quantised whitened kernel vectors).
All integers: merging is exact, associative and commutative, so partials
from any number of input partitions, merged in any order, give the totals of
their union. The worker of a later issue writes one per input partition and
window; the owner of the window merges them, adds the noise once and
releases (``privstream.aggregates.release``).

``Accumulator`` bounds contributions while it sums, in input order:

* with ``privacy.subject``: a subject's first ``groups_per_subject`` cells,
  and in each its first ``records_per_group`` records (the rest is left
  out). A subject is its canonical bytes, the ledger's (``subject_column``:
  ``7`` and ``"7"`` are one subject, an integer beyond 64 bits its digits);
  a record whose subject has none (``no_subject``: missing, null, ``""``, a
  boolean, a float, a list, an object) enters no aggregate. Bounds are per
  subject: removing a subject changes no other subject's kept records, so
  the sensitivity holds. Partials merge only over inputs that hold disjoint
  subjects (Kafka partitions keyed by subject).
* with ``correlation``: each value of ``by``'s first ``max_group`` records;
  removing one lets the next one in (the swap of ``sensitivity``). All
  records of one ``by`` value must reach the same accumulator.
"""

from __future__ import annotations

import enum
import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from numpy.typing import NDArray

from privstream.aggregates.read import Cell, RecordReader
from privstream.errors import MisuseError
from privstream.pipeline.subjects import canonical_subject


class _Default(enum.Enum):
    #: ``Accumulator.add``'s default: read the subject from the decoded record
    FROM_RECORD = enum.auto()


FROM_RECORD = _Default.FROM_RECORD
#: a record's canonical subject bytes, None (no subject), or read them from the record
Subject = bytes | None | _Default

#: the whitened kernel vectors of values (``RecordReader.vector``)
Vector = Callable[[Sequence[float]], NDArray[np.int64]]
#: density records whitened and summed per call at most
VECTOR_CHUNK = 8192


@dataclass(frozen=True)
class Partial:
    """Per-cell counts and grid sums of one aggregate over (part of) one window."""

    aggregate: str
    window: str
    counts: Mapping[Cell, int] = field(default_factory=dict)
    sums: Mapping[Cell, int] = field(default_factory=dict)

    def digest(self) -> bytes:
        """SHA-256 of the exact totals (canonical: sorted cells, zeros left out), so equal
        totals give equal digests however they were accumulated."""
        parts = [
            sorted((orjson.dumps(list(cell)), value) for cell, value in totals.items() if value)
            for totals in (self.counts, self.sums)
        ]
        text = orjson.dumps([[[c.decode(), v] for c, v in part] for part in parts])
        return hashlib.sha256(text).digest()


def merge(first: Partial, second: Partial) -> Partial:
    """The partial of the union of two disjoint inputs (cell by cell sums)."""
    if (first.aggregate, first.window) != (second.aggregate, second.window):
        raise MisuseError(
            f"cannot merge partials of ({first.aggregate}, {first.window}) and "
            f"({second.aggregate}, {second.window}): one aggregate and window at a time"
        )
    counts, sums = Counter(first.counts), Counter(first.sums)
    counts.update(second.counts)
    sums.update(second.sums)
    return Partial(first.aggregate, first.window, dict(counts), dict(sums))


@dataclass(frozen=True)
class Bounds:
    """Contribution bounds: per subject (cells, records per cell) or per correlated group."""

    groups_per_subject: int | None = None
    records_per_group: int | None = None
    max_group: int | None = None


class Accumulator:
    """Sums one aggregate's records of one window, bounding contributions in input order."""

    def __init__(self, name: str, window: str, reader: RecordReader, bounds: Bounds) -> None:
        self.name = name
        self.window = window
        self._reader = reader
        self._bounds = bounds
        self._counts: Counter[Cell] = Counter()
        self._sums: Counter[Cell] = Counter()
        self._cells_of: dict[bytes, set[Cell]] = {}
        self._per_cell: Counter[tuple[bytes, Cell]] = Counter()
        self._per_group: Counter[bytes] = Counter()

    def add_all(
        self, records: Iterable[Mapping[str, Any]], subjects: Iterable[Subject] | None = None
    ) -> None:
        """``add`` each record; ``subjects``: their canonical subject bytes, computed from
        the raw messages (``subject_column``), read from each record if None."""
        pairs = (
            zip(records, subjects, strict=True) if subjects is not None else _with_subjects(records)
        )
        if self._reader.vector is None:
            for record, subject in pairs:
                self.add(record, subject)
            return
        admitted: dict[Cell, list[float]] = {}
        for record, subject in pairs:
            found = self._admit_number(record, subject)
            if found is not None:
                admitted.setdefault(found[0], []).append(found[1])
        for cell, numbers in admitted.items():
            self._add_vectors(cell, numbers)

    def add(self, record: Mapping[str, Any], subject: Subject = FROM_RECORD) -> None:
        """Count the record in its cell if the aggregate reads it and the bounds admit it.

        ``subject``: its canonical subject bytes from the raw message (``subject_column``);
        by default read from the decoded record (exact for strings and 64-bit integers).
        """
        reader = self._reader
        cell = reader.cell(record)
        if cell is None:
            return
        if reader.vector is not None:
            self.add_all([record], [subject])
            return
        value = 0
        if reader.value_field is not None:
            read = reader.value(record)
            if read is None:
                return
            value = read
        if not self._admit(record, cell, subject):
            return
        self._counts[cell] += 1
        if reader.value_field is not None:
            self._sums[cell] += value

    def _admit_number(
        self, record: Mapping[str, Any], subject: Subject
    ) -> tuple[Cell, float] | None:
        """A density's record: its cell and value, counted, if the bounds admit it."""
        cell = self._reader.cell(record)
        number = None if cell is None else self._reader.number(record)
        if cell is None or number is None or not self._admit(record, cell, subject):
            return None
        self._counts[cell] += 1
        return cell, number

    def _add_vectors(self, cell: Cell, numbers: list[float]) -> None:
        """The records' vectors into cells ``cell + (j,)``: exact integer sums in chunks
        (``VECTOR_CHUNK * 2^44`` stays inside int64)."""
        vector = self._reader.vector
        if vector is None:
            raise MisuseError(f"aggregate {self.name!r} sums no vectors")
        for j, total in enumerate(vector_totals(vector, numbers)):
            self._sums[(*cell, j)] += total

    def _admit(self, record: Mapping[str, Any], cell: Cell, subject: Subject) -> bool:
        bounds = self._bounds
        if bounds.max_group is not None:
            group = RecordReader.identity(record, self._reader.correlated_by)
            if group is None or self._per_group[group] >= bounds.max_group:
                return False
            self._per_group[group] += 1
        if bounds.records_per_group is None or bounds.groups_per_subject is None:
            return True
        if subject is FROM_RECORD:
            subject = _subject_of(record, self._reader.subject)
        if subject is None:  # no canonical bytes: the ledger's no_subject
            return False
        cells = self._cells_of.setdefault(subject, set())
        if cell not in cells and len(cells) >= bounds.groups_per_subject:
            return False
        if self._per_cell[subject, cell] >= bounds.records_per_group:
            return False
        cells.add(cell)
        self._per_cell[subject, cell] += 1
        return True

    def partial(self) -> Partial:
        return Partial(self.name, self.window, dict(self._counts), dict(self._sums))


def vector_totals(vector: Vector, numbers: Sequence[float]) -> list[int]:
    """The sum of the numbers' vectors, per grid point: exact integer sums in chunks
    (``VECTOR_CHUNK * 2^44`` stays inside int64)."""
    totals: list[int] = []
    for start in range(0, len(numbers), VECTOR_CHUNK):
        chunk = vector(numbers[start : start + VECTOR_CHUNK]).sum(axis=0).tolist()
        totals = [a + b for a, b in zip(totals, chunk, strict=True)] if totals else chunk
    return totals


def _subject_of(record: Mapping[str, Any], name: str | None) -> bytes | None:
    """The canonical bytes of the record's subject, as the ledger reads the field (top level)."""
    return None if name is None else canonical_subject(record.get(name))


def _with_subjects(
    records: Iterable[Mapping[str, Any]],
) -> Iterable[tuple[Mapping[str, Any], Subject]]:
    return ((record, FROM_RECORD) for record in records)

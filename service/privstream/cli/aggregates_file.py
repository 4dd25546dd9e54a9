"""``sanitize --aggregates-output``: the config's aggregates over the whole file, one window.

The aggregates read exactly the records the record path released (a
dead-lettered line enters neither) that orjson reads (as ``run``), in file
order (each line is decoded by msgspec, only the fields the aggregates read,
where its own bytes show msgspec reads them as orjson does: ``_structs``,
``_line_by_line``), and are released once,
after the whole input is read, with fresh noise (``FreshCells``: files
have no noise key, so a second run is a second release and ``--overwrite``
says so). The rows go to their own file, one JSON object a line
(docs/aggregates.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar, cast

import orjson

from privstream.aggregates import AggregatePlan, CellNoise, _bounds, build_aggregates, release
from privstream.aggregates.columnar import ColumnAccumulator, UnitIds
from privstream.aggregates.columns import Batch
from privstream.aggregates.release import encode_rows
from privstream.cli.release_files import FilePathError
from privstream.config import AppConfig
from privstream.config.paths import split_path
from privstream.pipeline import RecordPlan, _columns
from privstream.pipeline.batch import read_names
from privstream.pipeline.columns import only
from privstream.pipeline.decode import (
    as_structs,
    collector_paused,
    decoded_struct,
    deep,
    field_structs,
    holds,
)
from privstream.pipeline.subjects import subject_column, subject_values

T = TypeVar("T")
#: the window label of file mode: the whole file is one window
FILE_WINDOW = "file"


def _parse(line: bytes) -> object:
    """The line's JSON value, or None where orjson refuses it (a lone surrogate escape, a
    number past the doubles, ``NaN``): such a line enters no aggregate, as in ``run``
    (``privstream.aggregates.stream``), though the record path may release it. (orjson
    reads an integer past 64 bits as a float: no line is refused for one.)"""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


def check_aggregates_output(config: AppConfig, path: str | None) -> None:
    """``--aggregates-output`` goes with a config that has aggregates, and only then."""
    if config.aggregates and path is None:
        raise FilePathError(
            f"the config has {len(config.aggregates)} aggregates: name the file their rows go "
            "to with --aggregates-output PATH (docs/aggregates.md)"
        )
    if path is not None and not config.aggregates:
        raise FilePathError(
            f"--aggregates-output {path}: the config has no aggregates; add an aggregates: list "
            "or leave the option out"
        )


def file_aggregates(config: AppConfig) -> FileAggregates | None:
    """The accumulators of the config's aggregates (None without any); MechanismError when
    no noise can serve one."""
    return FileAggregates(build_aggregates(config)) if config.aggregates else None


class FileAggregates:
    """Accumulates every aggregate over the released lines of a file."""

    def __init__(self, plans: Sequence[AggregatePlan]) -> None:
        self._plans = tuple(plans)
        self._subject = plans[0].reader.subject if plans else None
        self._keys = _top_level_keys(plans)
        # one id per subject for every aggregate: a batch's subjects are looked up once
        self._subject_ids = UnitIds()
        self._accumulators: tuple[ColumnAccumulator, ...] = tuple(
            plan.batch_accumulator(FILE_WINDOW, self._subject_ids) for plan in self._plans
        )

    def reads(self, plan: RecordPlan) -> tuple[str, ...]:
        """The fields the record path's decode should also read and hand over (``feed``):
        none where the aggregates read a path or a non-ASCII name, or the record path a
        nested field (its decoder's nested structs stay as they are); the aggregates then
        decode their own."""
        nested = any(not isinstance(name, str) for name in read_names(plan, None))
        return () if nested else self._keys or ()

    def feed(
        self,
        lines: Sequence[bytes],
        released: Sequence[int],
        decoded: tuple[list[Any], list[int]] | None = None,
    ) -> None:
        """Add the released lines (their positions in ``lines``) to every aggregate;
        ``decoded``: the record path's decode of ``lines`` (``BatchResult.decoded``)."""
        with collector_paused():  # decoded JSON makes no cycles (``collector_paused``)
            chosen = _picked(lines, released)
            unsure = _unsure(chosen)
            records = None if unsure else _handed(chosen, released, decoded, self._keys)
            subjects = None
            if records is None:
                records, subjects = _decoded(chosen, self._keys, self._subject, unsure)
            elif self._subject:  # ``subject_values`` reads structs too
                subjects = subject_values(records, chosen, self._subject)
            ids = None if subjects is None else self._subject_ids.of(subjects)
            batch = Batch(records)
            for accumulator in self._accumulators:
                accumulator.add_all(batch, ids)

    def encoded(self, noise: CellNoise) -> bytes:
        """Every aggregate's rows as JSON Lines, in config order."""
        rows = [
            row
            for plan, accumulator in zip(self._plans, self._accumulators, strict=True)
            for row in release(plan, accumulator.partial(), noise)
        ]
        return encode_rows(rows)


def _top_level_keys(plans: Sequence[AggregatePlan]) -> tuple[str, ...] | None:
    """The keys of every field the aggregates read (subjects included), None unless each
    is a plain top-level ASCII name: its own key, as ``subject_values`` reads the subject
    (msgspec's keys must be ASCII: ``privstream.pipeline.decode``)."""
    readers = [plan.reader for plan in plans]
    names = {
        name
        for r in readers
        for name in (*r.cell_fields, r.value_field, r.subject, r.correlated_by)
        if name is not None
    }
    if not all(name.isascii() and split_path(name) == (name,) for name in names):
        return None
    return tuple(sorted(names))


def _structs(chosen: list[bytes], keys: tuple[str, ...], unsure: list[int]) -> list[Any] | None:
    """The lines as msgspec's structs of ``keys`` (absent: ``MISSING``), where each holds
    the values orjson reads, else None: every line is UTF-8, nests no deeper than ``decode``
    follows, has no number the decoders may read otherwise (``unsure`` is empty) and is
    accepted by msgspec. Else each line is decoded by itself (``_line_by_line``)."""
    longest = _columns.longest(chosen)  # -1 unless every line is bytes
    if unsure or longest < 0 or not _columns.utf8(chosen) or deep(chosen, longest):
        return None
    return field_structs(chosen, keys)


def _handed(
    chosen: list[bytes],
    released: Sequence[int],
    decoded: tuple[list[Any], list[int]] | None,
    keys: tuple[str, ...] | None,
) -> list[Any] | None:
    """The released lines' structs from the record path's decode: only where it decoded
    the whole chunk into structs holding ``keys`` (then its checks of UTF-8 and nesting
    were made); else None. The caller hands over no chunk with an unsure line."""
    if decoded is None or keys is None or not chosen:
        return None
    objs, where = decoded
    if len(where) != len(objs) or where[-1:] != [len(objs) - 1] or not decoded_struct(objs[0]):
        return None  # not one struct per line, in order
    if not holds(objs[0], keys):
        return None
    return _picked(objs, released)


def _picked(items: Sequence[T], released: Sequence[int]) -> list[T]:
    """The released ones of ``items``: all of them (as a list), when as many positions as
    items are released (distinct, in order: ``_sanitize_chunk``)."""
    if len(released) == len(items):
        return list(items)
    return [items[index] for index in released]


def _unsure(chosen: list[bytes]) -> list[int]:
    """The positions of the lines where msgspec may read a number otherwise than orjson,
    or accept a line orjson refuses for one (``_bounds.may_disagree``: a run of 19 digits,
    an exponent of 3; docs/proofs/aggregates.md step 1). None for a chunk not all bytes
    (it is left to orjson whole)."""
    return _bounds.may_disagree(chosen) if _columns.longest(chosen) >= 0 else []


def _decoded(
    chosen: list[bytes], keys: tuple[str, ...] | None, subject: str | None, unsure: list[int]
) -> tuple[list[Any], list[bytes | None] | None]:
    """The lines' records (structs of ``keys``, or dicts), and each one's subject as the
    ledger reads it (``subject_column``; None without ``privacy.subject``)."""
    structs = None if keys is None else _structs(chosen, keys, unsure)
    if structs is not None:  # ``subject_values`` reads structs too
        return structs, subject_values(structs, chosen, subject) if subject else None
    if keys is not None and _columns.longest(chosen) >= 0:
        records, raw = _line_by_line(chosen, keys, set(unsure))
        return records, subject_values(records, raw, subject) if subject else None
    try:  # the common chunk: one C loop, and the subjects from the same decode
        parsed: list[object] = list(map(orjson.loads, chosen))
    except orjson.JSONDecodeError:
        parsed = []
    if parsed and only(parsed, dict):
        records = cast(list[dict[str, Any]], parsed)
        # ``subject_column``'s own path for a batch orjson decodes to objects
        return records, subject_values(records, chosen, subject) if subject else None
    parsed = [_parse(line) for line in chosen]
    # a line orjson refuses is left out (``_parse``); a released line is an object
    kept = [i for i, record in enumerate(parsed) if isinstance(record, dict)]
    raw = [chosen[i] for i in kept]
    records = [cast(dict[str, Any], parsed[i]) for i in kept]
    return records, subject_column(raw, subject) if subject else None


def _line_by_line(
    chosen: list[bytes], keys: tuple[str, ...], unsure: set[int]
) -> tuple[list[Any], list[bytes]]:
    """Each line decoded by the decoder its own bytes choose, so no line decides how
    another is read: orjson where ``unsure`` holds it, it is not UTF-8 or may nest too
    deep, or msgspec refuses it; else msgspec's struct of ``keys``. The records (orjson's
    objects as the same structs: ``as_structs``; a line orjson refuses, or that is no
    object, is left out, as in ``_parse``) and their lines."""
    whole = _columns.utf8(chosen) and not deep(chosen, _columns.longest(chosen))
    fast = [i for i in range(len(chosen)) if i not in unsure and (whole or _checked(chosen[i]))]
    structs = field_structs([chosen[i] for i in fast], keys)
    if structs is not None:
        found = dict(zip(fast, structs, strict=True))
    else:  # a line msgspec refuses: each tried alone
        alone = [(i, field_structs([chosen[i]], keys)) for i in fast]
        found = {i: one[0] for i, one in alone if one is not None}
    slow = [i for i in range(len(chosen)) if i not in found]
    parsed = [(i, _parse(chosen[i])) for i in slow]
    objects = [(i, obj) for i, obj in parsed if isinstance(obj, dict)]
    converted = as_structs([cast(dict[str, Any], obj) for _, obj in objects], keys)
    found.update(zip([i for i, _ in objects], converted, strict=True))
    kept = sorted(found)
    return [found[i] for i in kept], [chosen[i] for i in kept]


def _checked(line: bytes) -> bool:
    """Whether the line passes ``decode``'s own checks for msgspec: UTF-8, shallow."""
    return _columns.utf8([line]) and not deep([line], len(line))

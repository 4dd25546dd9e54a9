"""The open windows of one worker's input partitions, and the releases that are due.

Pure (no Kafka): ``OpenWindows`` sums each (aggregate, window, partition)
in offset order with the contribution bounds of ``Accumulator``, drops the
records of windows already closed (late: past the grace), future and
misplaced records and, once the wall clock has passed a window's end and
grace, turns it into the records of the internal topic (``windows``). It
also says which input offset the worker may commit: the first offset of
the oldest open window's records, so a restart reads every open window's
records again, from its first, and sums them in the same order.
``releases`` merges the partials of every input partition of a due window
made under its plan and adds the noise once. Proof:
docs/proofs/aggregates.md ("Over Kafka").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import orjson

from privstream.aggregates.clocks import ReadClocks
from privstream.aggregates.noise import CellNoise
from privstream.aggregates.partial import FROM_RECORD, Accumulator, Partial, Subject, merge
from privstream.aggregates.plan import AggregatePlan
from privstream.aggregates.release import Row, release
from privstream.aggregates.time_sources import recorded, refuse_other_time, time_writes
from privstream.aggregates.windows import (
    MAX_FUTURE_MS,
    MS,
    PartialAt,
    Start,
    View,
    Write,
    aligned_up,
    clock_records,
    closed_until,
    decode_partial,
    encode_partial,
    partial_key,
    progress_record,
    released_record,
    start_record,
    window_label,
    window_start,
)
from privstream.errors import MisuseError
from privstream.pipeline.subjects import subject_column


@dataclass(frozen=True)
class Timing:
    """An aggregate's window length and grace, in milliseconds."""

    size: int
    grace: int

    @classmethod
    def of(cls, plan: AggregatePlan) -> Timing:
        window = plan.spec.window
        if window is None:
            raise MisuseError(f"aggregate {plan.name!r} has no window: `run` refuses it")
        return cls(window.size_seconds * MS, window.grace_seconds * MS)


class OpenWindows:
    """The accumulators of the open windows of the partitions this worker owns.

    Windows close by the wall clock alone (``closed_until``): a record's treatment
    (counted, late, future, misplaced) is a function of that record (its timestamp or
    ``window.time``, subject and partition) and of when it is first read (``ReadClocks``),
    never of another record's
    contents (docs/proofs/aggregates.md, step 19).
    """

    def __init__(self, plans: Sequence[AggregatePlan], view: View) -> None:
        refuse_other_time(view, plans)  # before anything is counted under this config
        self._plans = tuple(plans)
        self._timing = tuple(Timing.of(plan) for plan in plans)
        self._sizes = {p.name: t.size for p, t in zip(self._plans, self._timing, strict=True)}
        self._view = view
        self._subject_field = plans[0].reader.subject if plans else None
        self._clocks = ReadClocks(view.clocks)
        #: partition -> (aggregate index, window start) -> (accumulator, first offset); per
        #: partition, as ``close`` and ``held`` walk one partition's windows
        self._open: dict[int, dict[tuple[int, int], tuple[Accumulator, int]]] = {}
        #: aggregate -> the start of its first window, as this session judges records
        self._firsts: dict[str, int] = {}
        #: the epoch records to write with the next ``close``: the names the config lost
        #: (tombstoned: a name that comes back starts again) and the new ones
        names = {plan.name for plan in self._plans}
        self._starts: list[Write] = [
            start_record(a, None) for a in sorted(view.starts) if a not in names
        ]
        self._starts += time_writes(view, plans)
        #: the aggregates whose plan changed since their start was recorded: a function of
        #: the configs alone (logged; never of the records: no count of partials)
        self.changed = [p.name for p in self._plans if _replanned(view, p)]
        for plan in self._plans:
            if _replanned(view, plan):  # the same start, under the new plan
                start = view.starts[plan.name]._replace(plan=plan.partial_id)
                self._starts.append(start_record(plan.name, start))

    def add(
        self,
        partition: int,
        offset: int,
        timestamp_ms: int,
        value: bytes | None,
        now_ms: int,
        *,
        misplaced: bool,
        admits: Callable[[int, int], bool] | None = None,
    ) -> None:
        """One input record, in offset order; a value that is no JSON object enters nothing.

        A record's time is its Kafka timestamp, or with ``window.time`` its field's
        (``FieldTime``: an aggregate leaves out a record without a readable one).
        Left out: a record whose time is more than ``MAX_FUTURE_MS`` past its partition's
        read clock (a future record: it would hold its window, and the committed offset,
        open until then; judged by the committed clock of ``ReadClocks`` whatever the time
        source, so the same on a replay), a record of a window already closed on its
        partition (late), a ``misplaced`` one (its subject's records belong to another
        partition, whose bounds count them: here they would count a second time), and one
        read again after an offset reset whose committed clock entry was pruned
        (``ReadClocks.judge``). With a ledger, ``admits(aggregate index, window start)``
        says whether the ledger admitted the record's contribution to that window (no
        decision: not admitted, left out; docs/proofs/ledger-aggregates.md, step 8).
        """
        self.begin(now_ms)
        clock = self._clocks.judge(partition, offset, now_ms)
        record = _parse(value)
        if clock is None or record is None or misplaced:
            return
        subject = self._subject(value)
        for index, (plan, timing) in enumerate(zip(self._plans, self._timing, strict=True)):
            at = timestamp_ms if plan.time is None else plan.time(record)
            if at is None or at > clock + MAX_FUTURE_MS:
                continue  # no readable time (``window.time``), or a future one
            start = window_start(at, timing.size)
            if not self._is_open(index, partition, start):
                continue  # late, or before the aggregate's first window
            if admits is not None and not admits(index, start):
                continue  # the ledger refused (or never decided) this contribution
            where, opened = (index, start), self._open.setdefault(partition, {})
            if where not in opened:
                opened[where] = (plan.accumulator(window_label(start, timing.size)), offset)
            opened[where][0].add(record, subject)

    def _subject(self, value: bytes | None) -> Subject:
        """The record's subject as the ledger and ``misplaced`` read it: the canonical bytes
        of the RAW value (an integer beyond 64 bits is its digits, never a parsed float)."""
        if self._subject_field is None or value is None:
            return FROM_RECORD
        return subject_column([value], self._subject_field)[0]

    def begin(self, now_ms: int) -> None:
        """Fix every aggregate's first window for the session (``_first``), once, at its
        first step's wall clock: before any record is read, so a new name's start never
        depends on which record is read first, nor on its fields (red team 14b, F3;
        docs/proofs/aggregates.md, step 19). ``add`` and ``close`` call it too."""
        if len(self._firsts) < len(self._plans):
            for index in range(len(self._plans)):
                self._first(index, now_ms)

    def _is_open(self, index: int, partition: int, start: int) -> bool:
        size = self._timing[index].size
        closed = self._view.progress.get((self._plans[index].name, partition))
        first = self._firsts[self._plans[index].name]
        return start >= first and (closed is None or start + size > closed)

    def _first(self, index: int, now_ms: int) -> int:
        """The start of the aggregate's first window: its epoch record's, or, for a name
        the topic does not hold, if nothing has closed yet the one holding the deployment's
        epoch (``_fresh``), else the first starting at or after both ``now_ms`` and every
        name's released end and progress (``View.last_closed``: a worker whose clock is
        behind never starts it before a window another name released); its epoch record
        is written with the next ``close``."""
        plan, size = self._plans[index], self._timing[index].size
        first = self._firsts.get(plan.name)
        if first is None:
            first = self._view.first_window(plan.name, size)
        if first is None:
            fresh = self._fresh(index)
            first = aligned_up(max(now_ms, self._view.last_closed()), size)
            first = first if fresh is None else fresh
            self._starts.append(start_record(plan.name, Start(first, plan.partial_id)))
        self._firsts[plan.name] = first
        return first

    def _fresh(self, index: int) -> int | None:
        """A new state's first window (None: something has closed): the one holding the
        epoch; or, when the output topics hold releases of a retired state (its markers
        gone), the first starting a window and a grace past the epoch: that state
        released only windows its worker's clock had passed by their grace, so none
        ending there unless that clock was ahead of this one's by more than the window
        and twice the grace (red team 14a, finding 3)."""
        epoch, timing = self._view.epoch_ms, self._timing[index]
        if epoch is None or self._view.progress:
            return None
        if self._view.released_elsewhere:
            return aligned_up(epoch + timing.size + timing.grace, timing.size)
        return window_start(epoch, timing.size)

    @property
    def starting(self) -> bool:
        """Whether the topic's epoch records name other aggregates than the config (the
        next ``close`` writes them; the worker reads the topic again after: a replica
        that wrote another start beside it is then judged by the one kept)."""
        names = {plan.name for plan in self._plans}
        new_time = bool(time_writes(self._view, self._plans))
        return names != set(self._view.starts) or bool(self.changed) or new_time

    def rebase(self, view: View) -> None:
        """Go on with a newer read of the internal topic (other workers' progress);
        ChangelogError if it holds another time source (``refuse_other_time``)."""
        refuse_other_time(view, self._plans)
        self._view = view

    def close(self, partition: int, now_ms: int) -> list[Write]:
        """The records closing every window of the partition the wall clock has passed
        (its end plus the grace): the epoch records not written yet, then, if a window
        closes, the tombstones of its partials no release will read (``View.never_due``),
        the partials, each aggregate's progress and the partition's clock. The tombstones
        wait for a close the wall clock schedules: written alone, whether a transaction
        commits would tell whether the partition had records (red team 14a, finding 7)."""
        self.begin(now_ms)
        writes, self._starts = self._starts, []
        closed = self._closed(partition, now_ms)
        if not closed:
            return writes
        writes += [(key, None) for key in self._view.never_due(self._sizes, partition)]
        writes += closed
        # the verdicts of the records the partials hold, and of those passed
        held = self._held(partition, self._clocks.read(partition))
        clock = self._clocks.commit(partition, held)
        return writes if clock is None else writes + clock_records(partition, clock)

    def _closed(self, partition: int, now_ms: int) -> list[Write]:
        """The partials and progress of the windows newly closed (empty: none)."""
        writes: list[Write] = []
        for index, (plan, timing) in enumerate(zip(self._plans, self._timing, strict=True)):
            until = closed_until(now_ms, timing.size, timing.grace)
            before = self._view.progress.get((plan.name, partition))
            if until <= max(self._firsts[plan.name], before or 0):
                continue  # no window newly closed
            opened = self._open.get(partition, {})
            for where in sorted(w for w in opened if w[0] == index):
                start = where[1]
                if start + timing.size <= until:
                    partial = opened.pop(where)[0].partial()
                    at = PartialAt(plan.name, plan.partial_id, start, partition)
                    for chunk, value in enumerate(encode_partial(partial, plan.cell_budget)):
                        writes.append((partial_key(at._replace(chunk=chunk)), value))
            writes.append(progress_record(plan.name, partition, until))
        return writes

    def held(self, partition: int, position: int) -> int:
        """The input offset to commit for the partition: its oldest open window's first,
        and never past a record read since the partition's clock was last written (by a
        ``close`` that closed a window on it): a transaction that writes no clock for the
        partition (the first one's markers, a release, another partition's close) commits
        no verdict its replay would not give again (docs/proofs/aggregates.md, step 19)."""
        return self._clocks.unclocked(partition, self._held(partition, position))

    def _held(self, partition: int, position: int) -> int:
        firsts = [first for _, first in self._open.get(partition, {}).values()]
        return min([position, *firsts])


def _replanned(view: View, plan: AggregatePlan) -> bool:
    start = view.starts.get(plan.name)
    return start is not None and start.plan != plan.partial_id


def _parse(value: bytes | None) -> Mapping[str, Any] | None:
    if value is None:
        return None
    try:
        record = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


@dataclass(frozen=True)
class Release:
    """One window's rows and the internal records written with them."""

    plan: AggregatePlan
    label: str
    end_ms: int
    rows: list[Row]
    writes: list[Write]


def releases(
    plans: Sequence[AggregatePlan], view: View, noise: CellNoise, partitions: int
) -> list[Release]:
    """Every window closed by all ``partitions`` and not released yet: the merge of its
    partials made under this plan, noised once (keyed: the same view gives the same rows).

    A partial made under another plan (committed before a restart with other bounds,
    clamp range, grid or epsilon: another ``partial_id``) is left out, never merged: its
    records were bounded for another calibration. It is tombstoned with the rest. How many
    were left out is never said (an empty partial is no record: the count would tell
    whether a partition had records); ``OpenWindows.changed`` names the plan change.
    Nothing is released of an aggregate whose time source the view does not hold yet
    (``time_record``: written by the first close, step 16).
    """
    out = []
    names = {plan.name for plan in plans}
    for plan in plans:
        if not recorded(view, plan):
            continue  # its time source is not committed yet (step 16: written before)
        timing = Timing.of(plan)
        for start in view.due(plan.name, timing.size, partitions, names):
            label = window_label(start, timing.size)
            inputs = sorted(view.inputs(plan.name, start).items())
            ours = [v for _, (at, v) in inputs if at.plan == plan.partial_id]
            parts = [decode_partial(plan.name, label, value) for value in ours]
            merged = reduce(merge, parts, Partial(plan.name, label))
            end = start + timing.size
            writes: list[Write] = [(key, None) for key, _ in inputs]
            writes.append(released_record(plan.name, end))
            rows = release(plan, merged, noise)
            out.append(Release(plan, label, end, rows, writes))
    return out

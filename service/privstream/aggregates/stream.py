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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import orjson

from privstream.aggregates.noise import CellNoise
from privstream.aggregates.partial import Accumulator, Partial, merge
from privstream.aggregates.plan import AggregatePlan
from privstream.aggregates.release import Row, release
from privstream.aggregates.windows import (
    MAX_FUTURE_MS,
    MS,
    PartialAt,
    View,
    Write,
    closed_until,
    decode_partial,
    encode_partial,
    partial_key,
    progress_record,
    released_record,
    window_label,
    window_start,
)
from privstream.errors import MisuseError


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
    ``window.time``, subject and partition) and of when it is read, never of another record's
    contents (docs/proofs/aggregates.md, step 19).
    """

    def __init__(self, plans: Sequence[AggregatePlan], view: View) -> None:
        self._plans = tuple(plans)
        self._timing = tuple(Timing.of(plan) for plan in plans)
        self._view = view
        #: (aggregate index, window start, partition) -> (accumulator, first offset)
        self._open: dict[tuple[int, int, int], tuple[Accumulator, int]] = {}

    def add(
        self,
        partition: int,
        offset: int,
        timestamp_ms: int,
        value: bytes | None,
        now_ms: int,
        *,
        misplaced: bool,
    ) -> None:
        """One input record, in offset order; a value that is no JSON object enters nothing.

        A record's time is its Kafka timestamp, or with ``window.time`` its field's
        (``FieldTime``: an aggregate leaves out a record without a readable one).
        Left out: a record whose time is more than ``MAX_FUTURE_MS`` past the wall clock
        (a future record: it would hold its window, and the committed offset, open until
        then), a record of a window already closed on its partition (late), and a
        ``misplaced`` one (its subject's records belong to another partition, whose
        bounds count them: here they would count a second time).
        """
        record = _parse(value)
        if record is None or misplaced:
            return
        for index, (plan, timing) in enumerate(zip(self._plans, self._timing, strict=True)):
            at = timestamp_ms if plan.time is None else plan.time(record)
            if at is None or at > now_ms + MAX_FUTURE_MS:
                continue  # no readable time (``window.time``), or a future one
            start = window_start(at, timing.size)
            if not self._is_open(plan.name, timing, partition, start):
                continue  # late
            where = (index, start, partition)
            if where not in self._open:
                label = window_label(start, timing.size)
                self._open[where] = (plan.accumulator(label), offset)
            self._open[where][0].add(record)

    def _is_open(self, name: str, timing: Timing, partition: int, start: int) -> bool:
        closed = self._view.progress.get((name, partition))
        first = self._view.first_window(timing.size)
        return start >= first and (closed is None or start + timing.size > closed)

    def rebase(self, view: View) -> None:
        """Go on with a newer read of the internal topic (other workers' progress)."""
        self._view = view

    def close(self, partition: int, now_ms: int) -> list[Write]:
        """The records closing every window of the partition the wall clock has passed
        (its end plus the grace): their partials, then each aggregate's progress (empty
        when nothing closes)."""
        writes: list[Write] = []
        for index, (plan, timing) in enumerate(zip(self._plans, self._timing, strict=True)):
            until = closed_until(now_ms, timing.size, timing.grace)
            before = self._view.progress.get((plan.name, partition))
            if until <= max(self._view.first_window(timing.size), before or 0):
                continue  # no window newly closed
            for where in sorted(w for w in self._open if w[0] == index and w[2] == partition):
                start = where[1]
                if start + timing.size <= until:
                    partial = self._open.pop(where)[0].partial()
                    at = PartialAt(plan.name, plan.partial_id, start, partition)
                    for chunk, value in enumerate(encode_partial(partial)):
                        writes.append((partial_key(at._replace(chunk=chunk)), value))
            writes.append(progress_record(plan.name, partition, until))
        return writes

    def held(self, partition: int, position: int) -> int:
        """The input offset to commit for the partition: its oldest open window's first."""
        firsts = [first for (_, _, p), (_, first) in self._open.items() if p == partition]
        return min([position, *firsts])


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
    #: partials of the window made under another plan: left out (and tombstoned)
    left_out: int = 0


def releases(
    plans: Sequence[AggregatePlan], view: View, noise: CellNoise, partitions: int
) -> list[Release]:
    """Every window closed by all ``partitions`` and not released yet: the merge of its
    partials made under this plan, noised once (keyed: the same view gives the same rows).

    A partial made under another plan (committed before a restart with other bounds,
    clamp range, grid or epsilon: another ``partial_id``) is left out, never merged: its
    records were bounded for another calibration. It is tombstoned with the rest.
    """
    out = []
    for plan in plans:
        timing = Timing.of(plan)
        for start in view.due(plan.name, timing.size, partitions):
            label = window_label(start, timing.size)
            inputs = sorted(view.inputs(plan.name, start).items())
            ours = [v for _, (at, v) in inputs if at.plan == plan.partial_id]
            parts = [decode_partial(plan.name, label, value) for value in ours]
            merged = reduce(merge, parts, Partial(plan.name, label))
            end = start + timing.size
            writes: list[Write] = [(key, None) for key, _ in inputs]
            writes.append(released_record(plan.name, end))
            rows = release(plan, merged, noise)
            out.append(Release(plan, label, end, rows, writes, len(inputs) - len(ours)))
    return out

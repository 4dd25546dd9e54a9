"""The open windows of one worker's input partitions, and the releases that are due.

Pure (no Kafka): ``OpenWindows`` sums each (aggregate, window, partition)
in offset order with the contribution bounds of ``Accumulator``, drops the
records of windows already closed (late: past the grace) and, at a
partition's watermark, turns the windows it closes into the records of the
internal topic (``windows``). It also says which input offset the worker
may commit: the first offset of the oldest open window's records, so a
restart reads every open window's records again, from its first, and sums
them in the same order. ``releases`` merges the partials of every input
partition of a due window and adds the noise once. Proof:
docs/proofs/aggregates.md ("Over Kafka").
"""

from __future__ import annotations

from collections import Counter
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
    View,
    decode_partial,
    encode_partial,
    partial_key,
    progress_record,
    released_record,
    watermark,
    window_label,
    window_start,
)
from privstream.errors import MisuseError

#: (key, value) of the internal topic (value None: a tombstone)
Write = tuple[bytes, bytes | None]


@dataclass(frozen=True)
class Timing:
    """An aggregate's window length, grace and idle time, in milliseconds."""

    size: int
    grace: int
    idle: int

    @classmethod
    def of(cls, plan: AggregatePlan) -> Timing:
        window = plan.spec.window
        if window is None:
            raise MisuseError(f"aggregate {plan.name!r} has no window: `run` refuses it")
        return cls(window.size_seconds * MS, window.grace_seconds * MS, window.idle_seconds * MS)


class OpenWindows:
    """The accumulators of the open windows of the partitions this worker owns."""

    def __init__(self, plans: Sequence[AggregatePlan], view: View) -> None:
        self._plans = tuple(plans)
        self._timing = tuple(Timing.of(plan) for plan in plans)
        self._view = view
        #: (aggregate index, window start, partition) -> (accumulator, first offset)
        self._open: dict[tuple[int, int, int], tuple[Accumulator, int]] = {}
        self._newest: dict[int, int] = {}
        #: late records per aggregate name since the last ``take_late``
        self._late: Counter[str] = Counter()

    def add(
        self, partition: int, offset: int, timestamp_ms: int, value: bytes | None, now_ms: int
    ) -> None:
        """One input record, in offset order; a value that is no JSON object enters nothing.

        A timestamp more than ``MAX_FUTURE_MS`` past the wall clock is left out like a
        late record and moves no watermark: one record can close no partition's windows
        for days to come (nor make every later record of it late).
        """
        record = _parse(value)
        if timestamp_ms > now_ms + MAX_FUTURE_MS:
            self._late.update(plan.name for plan in self._plans)
            return
        self._newest[partition] = max(self._newest.get(partition, timestamp_ms), timestamp_ms)
        if record is None:
            return
        for index, (plan, timing) in enumerate(zip(self._plans, self._timing, strict=True)):
            start = window_start(timestamp_ms, timing.size)
            if not self._is_open(plan.name, timing, partition, start):
                self._late[plan.name] += 1
                continue
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

    def take_late(self) -> Counter[str]:
        late, self._late = self._late, Counter()
        return late

    def close(self, partition: int, now_ms: int, caught_up: bool) -> list[Write]:
        """The records closing every window the partition's watermark has passed: their
        partials, then each aggregate's progress (empty when nothing closes)."""
        writes: list[Write] = []
        for index, (plan, timing) in enumerate(zip(self._plans, self._timing, strict=True)):
            mark = watermark(
                self._newest.get(partition), now_ms, caught_up, timing.grace, timing.idle
            )
            until = window_start(mark, timing.size)
            before = self._view.progress.get((plan.name, partition))
            if until <= max(self._view.first_window(timing.size), before or 0):
                continue  # no window newly closed
            for where in sorted(w for w in self._open if w[0] == index and w[2] == partition):
                start = where[1]
                if start + timing.size <= until:
                    partial = self._open.pop(where)[0].partial()
                    if partial.counts or partial.sums:
                        writes.append(
                            (partial_key(plan.name, start, partition), encode_partial(partial))
                        )
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


def releases(
    plans: Sequence[AggregatePlan], view: View, noise: CellNoise, partitions: int
) -> list[Release]:
    """Every window closed by all ``partitions`` and not released yet: the merge of its
    partials, noised once (keyed: the same view gives the same rows)."""
    out = []
    for plan in plans:
        timing = Timing.of(plan)
        for start in view.due(plan.name, timing.size, partitions):
            label = window_label(start, timing.size)
            inputs = view.inputs(plan.name, start)
            empty = Partial(plan.name, label)
            parts = [decode_partial(plan.name, label, inputs[p]) for p in sorted(inputs)]
            merged = reduce(merge, parts, empty)
            end = start + timing.size
            writes: list[Write] = [(partial_key(plan.name, start, p), None) for p in sorted(inputs)]
            writes.append(released_record(plan.name, end))
            out.append(Release(plan, label, end, release(plan, merged, noise), writes))
    return out

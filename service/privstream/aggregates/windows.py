"""Tumbling event-time windows over Kafka partitions, and the aggregates' internal topic.

Pure (no Kafka): which window a timestamp falls in, its label (what the noise
is keyed to), each partition's watermark, and the records of the internal
compacted topic ``<input>-privstream-aggregates`` with the state they fold
into (``View``). The worker (``privstream.worker.aggregates``) writes them in
its transactions. Keys and values are canonical JSON:

* ``{"t":"epoch"}``: the wall-clock millisecond of the first transaction;
  every aggregate's windows are released from the one holding it onwards,
  each one, in order, records or not (whether a window is released never
  depends on the records);
* ``{"t":"progress","a":A,"p":P}``: input partition ``P`` has closed every
  window of aggregate ``A`` ending at or before ``until`` (its committed
  watermark, rounded down to a window boundary);
* ``{"t":"partial","a":A,"w":W,"p":P}``: the partial of aggregate ``A``,
  window start ``W``, partition ``P`` (tombstoned once the window is
  released);
* ``{"t":"released","a":A}``: every window of ``A`` ending at or before
  ``until`` is released (written with the rows, in one transaction).

Proof: docs/proofs/aggregates.md ("Over Kafka").
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from privstream.aggregates.partial import Partial
from privstream.aggregates.read import Cell

MS = 1000
#: how far past the wall clock a record's timestamp may be (a day): further, it is late
MAX_FUTURE_MS = 86_400_000
#: windows released per aggregate per step at most (a backlog is released over steps)
MAX_DUE = 64


def window_start(timestamp_ms: int, size_ms: int) -> int:
    """The start of the tumbling window holding ``timestamp_ms`` (windows from the epoch 0)."""
    return timestamp_ms - timestamp_ms % size_ms


def window_label(start_ms: int, size_ms: int) -> str:
    """The window's released label (and noise key): its UTC start and length."""
    start = datetime.datetime.fromtimestamp(start_ms / MS, datetime.UTC)
    return f"{start.strftime('%Y-%m-%dT%H:%M:%S.%f')[:-3]}Z/{size_ms // MS}s"


def watermark(
    newest_ms: int | None, now_ms: int, caught_up: bool, grace_ms: int, idle_ms: int
) -> int:
    """A partition's watermark: its newest timestamp less the grace; while it has nothing
    more to read, at least the wall clock less the idle time and the grace."""
    seen = -(2**62) if newest_ms is None else newest_ms
    if caught_up:
        seen = max(seen, now_ms - idle_ms)
    return seen - grace_ms


def _key(**parts: Any) -> bytes:
    return orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)


def _value(**parts: Any) -> bytes:
    return orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)


def epoch_record(now_ms: int) -> tuple[bytes, bytes]:
    return _key(t="epoch"), _value(start=now_ms)


def progress_record(aggregate: str, partition: int, until_ms: int) -> tuple[bytes, bytes]:
    return _key(t="progress", a=aggregate, p=partition), _value(until=until_ms)


def released_record(aggregate: str, until_ms: int) -> tuple[bytes, bytes]:
    return _key(t="released", a=aggregate), _value(until=until_ms)


def partial_key(aggregate: str, start_ms: int, partition: int) -> bytes:
    return _key(t="partial", a=aggregate, w=start_ms, p=partition)


def encode_partial(partial: Partial) -> bytes:
    """The partial's cells and integers (cells as JSON lists: strings and integers kept)."""
    return orjson.dumps(
        {
            "counts": [[list(c), n] for c, n in partial.counts.items()],
            "sums": [[list(c), n] for c, n in partial.sums.items()],
        }
    )


def decode_partial(aggregate: str, label: str, value: bytes) -> Partial:
    raw = orjson.loads(value)

    def cells(pairs: Iterable[list[Any]]) -> dict[Cell, int]:
        return {tuple(cell): int(n) for cell, n in pairs}

    return Partial(aggregate, label, cells(raw["counts"]), cells(raw["sums"]))


@dataclass
class View:
    """What the internal topic says: the epoch, each partition's progress, each
    aggregate's released end and the partials not released yet."""

    epoch_ms: int | None = None
    #: (aggregate, partition) -> the end of its last closed window
    progress: dict[tuple[str, int], int] = field(default_factory=dict)
    released: dict[str, int] = field(default_factory=dict)
    #: (aggregate, window start, partition) -> the partial's encoded value
    partials: dict[tuple[str, int, int], bytes] = field(default_factory=dict)

    def fold(self, keys: list[bytes], values: list[bytes | None]) -> None:
        """Apply the next records of the topic, in offset order."""
        for key, value in zip(keys, values, strict=True):
            self.apply(key, value)

    def apply(self, key: bytes, value: bytes | None) -> None:
        parts = orjson.loads(key)
        kind = parts["t"]
        if kind == "partial":
            where = (parts["a"], parts["w"], parts["p"])
            if value is None:
                self.partials.pop(where, None)
            else:
                self.partials[where] = value
            return
        if value is None:
            return
        until = orjson.loads(value)
        if kind == "epoch":
            self.epoch_ms = until["start"]
        elif kind == "progress":
            self.progress[parts["a"], parts["p"]] = until["until"]
        elif kind == "released":
            self.released[parts["a"]] = until["until"]

    def first_window(self, size_ms: int) -> int:
        """The start of an aggregate's first window (the one holding the epoch)."""
        return window_start(self.epoch_ms or 0, size_ms)

    def closed_until(self, aggregate: str, partitions: int) -> int | None:
        """The time every input partition has closed the aggregate's windows up to (None:
        one has closed none)."""
        found = [self.progress.get((aggregate, p)) for p in range(partitions)]
        known = [f for f in found if f is not None]
        return None if len(known) < partitions else min(known)

    def due(self, aggregate: str, size_ms: int, partitions: int) -> list[int]:
        """The starts of the aggregate's windows every partition has closed and that are
        not released yet, in order (at most ``MAX_DUE``)."""
        closed = self.closed_until(aggregate, partitions)
        if closed is None or self.epoch_ms is None:
            return []
        released = self.released.get(aggregate, self.first_window(size_ms))
        start = -(-released // size_ms) * size_ms  # aligned, should the size have changed
        starts: list[int] = []
        while start + size_ms <= closed and len(starts) < MAX_DUE:
            starts.append(start)
            start += size_ms
        return starts

    def inputs(self, aggregate: str, start_ms: int) -> Mapping[int, bytes]:
        """The window's committed partials by partition (a partition without one had no
        record in it)."""
        return {p: v for (a, w, p), v in self.partials.items() if a == aggregate and w == start_ms}

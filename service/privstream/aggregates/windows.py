"""Tumbling event-time windows over Kafka partitions, and the aggregates' internal topic.

Pure (no Kafka): which window a timestamp falls in, its label (what the noise
is keyed to), when the wall clock closes it, and the records of the internal
compacted topic ``<input>-privstream-aggregates`` with the state they fold
into (``View``). The worker (``privstream.worker.aggregates``) writes them in
its transactions. Keys and values are canonical JSON:

* ``{"t":"deployment","g":G}``: deployment (``kafka.group_id``) ``G``
  uses the topic; a session finding another's is refused
  (``privstream.aggregates.deployments``);
* ``{"t":"partitions"}``: the input topic's partition count the subjects'
  home partitions were computed with (``misplaced``); a session that finds
  another count is refused (``privstream.aggregates.deployments``);
* ``{"t":"epoch"}``: the wall-clock millisecond of the first transaction;
* ``{"t":"epoch","a":A}``: where aggregate ``A``'s windows start, written
  with the first transaction that sees its name (``OpenWindows``): the
  window holding the deployment's epoch if nothing has closed yet (a window
  and a grace later after a retired state: ``released_elsewhere``), else the
  first window starting at or after both the wall clock and every name's
  released end and progress (a renamed or added aggregate never counts a
  record an older name may have released, whatever the clock), and the
  partial id of the plan that wrote it last. Tombstoned by a session whose
  config lacks ``A``, so a name that comes back starts again. Its windows are
  released from there onwards, each one, in order, records or not (whether a
  window is released never depends on the records);
* ``{"t":"progress","a":A,"p":P}``: input partition ``P`` has closed every
  window of aggregate ``A`` ending at or before ``until`` (by the wall clock:
  ``closed_until``);
* ``{"t":"partial","a":A,"i":I,"w":W,"p":P}``: the partial of aggregate
  ``A`` made under the plan of partial id ``I`` (``AggregatePlan.partial_id``:
  its release ids, so its bounds), window start ``W``, partition ``P``
  (tombstoned once the window is released; a release merges only the
  partials of its own plan);
* ``{"t":"clock","p":P,"b":K}``: input partition ``P``'s read clock
  entries, block ``K`` (``clocks.BLOCK`` entries each; tombstoned once
  pruned), and ``{"t":"clock","p":P}`` its read end
  (``privstream.aggregates.clocks``): what its records' future-ness is
  judged by, on a first read and on a replay alike;
* ``{"t":"time","a":A,"s":S}``: aggregate ``A`` counts and releases under
  time source ``S`` (``AggregatePlan.time_source``: the Kafka timestamp, or a
  ``window.time`` field with its parsing); written with the first
  transaction that sees the pair, before ``A`` releases anything under it,
  and never tombstoned: a session whose config would compare instants of
  two sources is refused (``privstream.aggregates.deployments.refuse_other_time``);
* ``{"t":"released","a":A}``: every window of ``A`` ending at or before
  ``until`` is released (written with the rows, in one transaction); never
  tombstoned: a config lacking ``A`` releases no window starting before it
  (``View.foreign_end``).

Proof: docs/proofs/aggregates.md ("Over Kafka").
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from privstream.aggregates.clocks import Clock, ClockCommit
from privstream.aggregates.partial import Partial
from privstream.aggregates.read import Cell
from privstream.config.aggregates import MAX_FUTURE_SECONDS

MS = 1000
#: how far past the wall clock a record's timestamp may be (as the ledger's default
#: ``max_future``): further, it is a future record, left out (config load bounds the
#: windows open at once with it: ``MAX_OPEN_WINDOWS``)
MAX_FUTURE_MS = MAX_FUTURE_SECONDS * MS
#: the bytes of one partial record's cells at most (Kafka's default max.message.bytes: 1 MiB)
CHUNK_BYTES = 512 * 1024
#: a record's key (an aggregate name of at most 200 characters, a 32-character partial id,
#: a few integers) and Kafka's record and batch framing, at most
RECORD_OVERHEAD = 640
#: a partial record's bytes besides its cells: the overhead and the empty lists' JSON
PARTIAL_OVERHEAD = RECORD_OVERHEAD + len(b'{"counts":[],"sums":[]}')
#: windows released per aggregate per step at most (a backlog is released over steps)
MAX_DUE = 64


def window_start(timestamp_ms: int, size_ms: int) -> int:
    """The start of the tumbling window holding ``timestamp_ms`` (windows from the epoch 0)."""
    return timestamp_ms - timestamp_ms % size_ms


def aligned_up(time_ms: int, size_ms: int) -> int:
    """The first window boundary at or after ``time_ms``."""
    return -(-time_ms // size_ms) * size_ms


def window_label(start_ms: int, size_ms: int) -> str:
    """The window's released label (and noise key): its UTC start and length."""
    start = datetime.datetime.fromtimestamp(start_ms / MS, datetime.UTC)
    return f"{start.strftime('%Y-%m-%dT%H:%M:%S.%f')[:-3]}Z/{size_ms // MS}s"


def closed_until(now_ms: int, size_ms: int, grace_ms: int) -> int:
    """Where the windows the wall clock has closed end: window ``[s, e)`` closes once
    ``now >= e + grace``, so every window ending at or before the largest window
    boundary at or below ``now - grace``. The records never move it."""
    return window_start(now_ms - grace_ms, size_ms)


def _key(**parts: Any) -> bytes:
    return orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)


def _value(**parts: Any) -> bytes:
    return orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)


#: (key, value) of the internal topic (value None: a tombstone)
Write = tuple[bytes, bytes | None]


def deployment_record(group: str) -> tuple[bytes, bytes]:
    return _key(t="deployment", g=group), _value()


def partitions_record(count: int) -> tuple[bytes, bytes]:
    return _key(t="partitions"), _value(n=count)


def epoch_record(now_ms: int) -> tuple[bytes, bytes]:
    return _key(t="epoch"), _value(start=now_ms)


class Start(NamedTuple):
    """Where an aggregate's windows start, and the partial id of the plan that wrote it."""

    start: int
    plan: str


def start_record(aggregate: str, start: Start | None) -> Write:
    """An aggregate's epoch record (None: its tombstone, the name left the config)."""
    value = None if start is None else _value(start=start.start, i=start.plan)
    return _key(t="epoch", a=aggregate), value


def progress_record(aggregate: str, partition: int, until_ms: int) -> tuple[bytes, bytes]:
    return _key(t="progress", a=aggregate, p=partition), _value(until=until_ms)


def clock_records(partition: int, commit: ClockCommit) -> list[Write]:
    """The partition's clock blocks with new entries, its pruned blocks' tombstones and
    its read end (``ReadClocks.commit``): each record at most ``BLOCK`` entries."""
    writes: list[Write] = [(_key(t="clock", p=partition, b=b), None) for b in commit.pruned]
    for block, entries in commit.blocks.items():
        writes.append((_key(t="clock", p=partition, b=block), _value(at=entries)))
    writes.append((_key(t="clock", p=partition), _value(read=commit.read)))
    return writes


def time_record(aggregate: str, source: str) -> tuple[bytes, bytes]:
    return _key(t="time", a=aggregate, s=source), _value()


def released_record(aggregate: str, until_ms: int) -> tuple[bytes, bytes]:
    return _key(t="released", a=aggregate), _value(until=until_ms)


class PartialAt(NamedTuple):
    """Where a partial belongs: aggregate, plan (its partial id), window start, partition."""

    aggregate: str
    #: ``AggregatePlan.partial_id`` ("": written before partials named their plan)
    plan: str
    start: int
    partition: int
    #: which of the partial's records (``encode_partial``): its cells are split over several
    chunk: int = 0


def partial_key(at: PartialAt) -> bytes:
    return _key(t="partial", a=at.aggregate, i=at.plan, w=at.start, p=at.partition, c=at.chunk)


def cell_budget(max_message_bytes: int) -> int:
    """The bytes of cells one partial record may hold: ``CHUNK_BYTES``, or less under a
    lower ``kafka.max_message_bytes`` (the producer refuses a larger record, and a close
    transaction holding one would fail forever: red team 14a, finding 5)."""
    return min(CHUNK_BYTES, max_message_bytes - PARTIAL_OVERHEAD)


def encode_partial(partial: Partial, budget: int = CHUNK_BYTES) -> list[bytes]:
    """The partial's cells and integers (cells as JSON lists: strings and integers kept), in
    records of at most ``budget`` bytes of cells each (``cell_budget``): with
    ``select_groups`` the cells come from the records, and one record larger than the
    producer's limit could never be committed. Each chunk holds whole cells; the chunks
    of one partial merge (``merge``: disjoint cells) into the partial. A cell is at most
    ``AggregatePlan.cell_bytes`` (``run`` refuses a limit below it). An empty partial is
    no record (its partition had no record in the window)."""
    chunks: list[dict[str, list[bytes]]] = []
    size = budget
    for part, totals in (("counts", partial.counts), ("sums", partial.sums)):
        for cell, n in totals.items():
            entry = orjson.dumps([list(cell), n])
            if size + len(entry) > budget:
                chunks.append({"counts": [], "sums": []})
                size = 0
            chunks[-1][part].append(entry)
            size += len(entry) + 1
    return [
        b'{"counts":[%b],"sums":[%b]}' % (b",".join(c["counts"]), b",".join(c["sums"]))
        for c in chunks
    ]


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
    #: the input's partition count committed with the first transaction
    partitions: int | None = None
    #: aggregate -> where its windows start (``start_record``)
    starts: dict[str, Start] = field(default_factory=dict)
    #: (aggregate, partition) -> the end of its last closed window
    progress: dict[tuple[str, int], int] = field(default_factory=dict)
    released: dict[str, int] = field(default_factory=dict)
    #: input partition -> its committed read clock
    clocks: dict[int, Clock] = field(default_factory=dict)
    #: the deployments (``kafka.group_id``) whose marker the topic holds
    deployments: set[str] = field(default_factory=set)
    #: the (aggregate, time source) pairs the topic holds (``time_record``)
    times: set[tuple[str, str]] = field(default_factory=set)
    #: a partial's key (as read) -> where it belongs and its encoded value
    partials: dict[bytes, tuple[PartialAt, bytes]] = field(default_factory=dict)
    #: the aggregates' output topics already hold records (not from the topic: the worker
    #: asks Kafka while nothing has closed): a retired state may have released windows
    #: this topic has no marker of (``OpenWindows._first``)
    released_elsewhere: bool = False

    def fold(self, keys: list[bytes], values: list[bytes | None]) -> None:
        """Apply the next records of the topic, in offset order."""
        for key, value in zip(keys, values, strict=True):
            self.apply(key, value)

    def apply(self, key: bytes, value: bytes | None) -> None:
        parts = orjson.loads(key)
        kind = parts["t"]
        if kind == "partial":
            if value is None:
                self.partials.pop(key, None)
            else:
                at = PartialAt(parts["a"], parts.get("i", ""), parts["w"], parts["p"])
                self.partials[key] = (at, value)
            return
        if kind == "deployment":
            (self.deployments.add if value is not None else self.deployments.discard)(parts["g"])
            return
        if kind == "time":
            pair = (parts["a"], parts["s"])
            (self.times.add if value is not None else self.times.discard)(pair)
            return
        if kind == "epoch" and "a" in parts:
            self._start(parts["a"], value)
            return
        if kind == "clock":
            self._clock(parts, value)
            return
        if value is None:
            return
        until = orjson.loads(value)
        if kind == "partitions":
            self.partitions = until["n"]
        elif kind == "epoch":
            self.epoch_ms = until["start"]
        elif kind == "progress":
            self.progress[parts["a"], parts["p"]] = until["until"]
        elif kind == "released":
            self.released[parts["a"]] = until["until"]

    def _clock(self, parts: Mapping[str, Any], value: bytes | None) -> None:
        """A clock block (``b``; None: pruned) or read end: a new ``Clock``, never changed
        in place (a copied view keeps its own)."""
        old = self.clocks.get(parts["p"], Clock({}, 0))
        if "b" not in parts:
            if value is not None:
                self.clocks[parts["p"]] = old._replace(read=orjson.loads(value)["read"])
            return
        blocks = dict(old.blocks)
        blocks.pop(parts["b"], None)
        if value is not None:
            blocks[parts["b"]] = tuple((int(o), int(c)) for o, c in orjson.loads(value)["at"])
        self.clocks[parts["p"]] = old._replace(blocks=blocks)

    def _start(self, aggregate: str, value: bytes | None) -> None:
        if value is None:
            self.starts.pop(aggregate, None)
        else:
            start = orjson.loads(value)
            self.starts[aggregate] = Start(start["start"], start["i"])

    def first_window(self, aggregate: str, size_ms: int) -> int | None:
        """The start of an aggregate's first window (None: it has no epoch record): its
        recorded start, aligned up should the window size have changed since."""
        start = self.starts.get(aggregate)
        return None if start is None else aligned_up(start.start, size_ms)

    def last_closed(self) -> int:
        """The largest ``released`` end or ``progress`` of any name the topic holds (0: none):
        no name released a window ending past it."""
        return max([0, *self.released.values(), *self.progress.values()])

    def closed_until(self, aggregate: str, partitions: int) -> int | None:
        """The time every input partition has closed the aggregate's windows up to (None:
        one has closed none)."""
        found = [self.progress.get((aggregate, p)) for p in range(partitions)]
        known = [f for f in found if f is not None]
        return None if len(known) < partitions else min(known)

    def foreign_end(self, names: Collection[str]) -> int:
        """The largest ``released`` end of a name not in ``names`` (0: none): a config
        whose aggregates are ``names`` releases no window starting before it, so no record
        is released by names of two configs that do not both hold them (a rename during a
        rolling deploy: docs/proofs/aggregates.md, step 16)."""
        return max([0, *(end for name, end in self.released.items() if name not in names)])

    def due(
        self, aggregate: str, size_ms: int, partitions: int, names: Collection[str]
    ) -> list[int]:
        """The starts of the aggregate's windows every partition has closed and that are
        not released yet, in order (at most ``MAX_DUE``), for a config whose aggregates
        are ``names``."""
        closed = self.closed_until(aggregate, partitions)
        start = self._due_from(aggregate, size_ms, names)
        if closed is None or start is None:
            return []
        starts: list[int] = []
        while start + size_ms <= closed and len(starts) < MAX_DUE:
            starts.append(start)
            start += size_ms
        return starts

    def _due_from(self, aggregate: str, size_ms: int, names: Collection[str]) -> int | None:
        """The start of the aggregate's next window to release (None: no epoch record)."""
        first = self.first_window(aggregate, size_ms)
        if first is None:
            return None
        # a name that came back, or a changed size: past what it released before; and
        # past what any name the config lacks released (the windows between are skipped)
        own = self.released.get(aggregate, first)
        return max(first, aligned_up(max(own, self.foreign_end(names)), size_ms))

    def never_due(self, sizes: Mapping[str, int], partition: int) -> list[bytes]:
        """The keys of the partition's partials no release will read (``sizes``: the
        config's window size per aggregate): of a name the config lacks, or of a window
        before the name's next due one or off its grid (a changed size). The release
        tombstones only the partials of due windows; these, the next close does."""
        return [
            key
            for key, (at, _) in self.partials.items()
            if at.partition == partition and self._never_due(at, sizes)
        ]

    def _never_due(self, at: PartialAt, sizes: Mapping[str, int]) -> bool:
        size_ms = sizes.get(at.aggregate)
        if size_ms is None:
            return True
        start = self._due_from(at.aggregate, size_ms, sizes.keys())
        return start is not None and (at.start < start or (at.start - start) % size_ms != 0)

    def inputs(self, aggregate: str, start_ms: int) -> Mapping[bytes, tuple[PartialAt, bytes]]:
        """The window's committed partials, of every plan, by key (a partition without one
        had no record in it)."""
        return {
            key: (at, value)
            for key, (at, value) in self.partials.items()
            if at.aggregate == aggregate and at.start == start_ms
        }

"""The committed read clocks: what a record's future-ness is judged by, the same on a replay.

A record stamped more than ``MAX_FUTURE_MS`` past the clock is a future
record, left out (it would hold its window, and the committed offset, open
until then). Judged by the wall clock when the record is read, the verdict
would depend on when it is read, and a record is read again after a restart
whenever an open window holds the committed offset before it: another
record's window would decide whether it counts (red team 13a).

So each partition's clock is committed. Reading a record past every
offset the partition has committed as read (new ground), the worker starts
a new entry ``(offset, tick)`` whenever the ``TICK_MS`` tick its read falls
in (the wall clock rounded down to the minute) is not the last entry's;
every record is judged by the latest entry at or before its offset: on new
ground, the tick of its own read, never an earlier record's. The entries
go to the internal topic in blocks of ``BLOCK`` (``{"t":"clock","p":P,
"b":K}``: the partition's entries ``K*BLOCK`` to ``K*BLOCK + BLOCK - 1``,
counted from its first; a block is rewritten while it fills and tombstoned
once pruned, so no record grows with the time a window is held open) and
the read end (``{"t":"clock","p":P}``) with every transaction that commits
the partition's partials, and no transaction commits its offsets
past a record judged on new ground before its clock is committed
(``unclocked``): the verdicts the offsets commit are the ones the clock
gives again. A record read again (before the committed read end)
was first read after exactly the entries at or before its offset, all
committed with that read end (an entry is made before the records past it
are read; later ones lie past them): its clock, so its verdict, is the
same. A record past the committed read end is judged as new; whatever a
crashed session decided about it was never committed. Proof:
docs/proofs/aggregates.md, step 19.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from typing import NamedTuple

#: a record is judged by the wall clock of its read rounded down to this (at most this much
#: behind), so one committed entry per this much read time at most
TICK_MS = 60_000
#: clock entries per committed record: at most ~40 bytes each (a 19-digit offset, a tick),
#: so a block fits the smallest ``kafka.max_message_bytes`` (1 KiB) with its key
BLOCK = 8

Entry = tuple[int, int]


class Clock(NamedTuple):
    """A partition's committed clock: its entries ``(first offset, tick ms)`` by block
    number, and its read end."""

    blocks: Mapping[int, tuple[Entry, ...]]
    #: the offset after the last record read when committed
    read: int

    @property
    def entries(self) -> list[Entry]:
        """Every kept entry, in offset order (blocks are numbered in entry order)."""
        return [entry for block in sorted(self.blocks) for entry in self.blocks[block]]

    @property
    def base(self) -> int:
        """The number of the first kept entry (pruning drops whole blocks)."""
        return min(self.blocks, default=0) * BLOCK


class ClockCommit(NamedTuple):
    """What a commit writes: the blocks with new entries, the pruned blocks, the read end."""

    blocks: dict[int, tuple[Entry, ...]]
    pruned: range
    read: int


class ReadClocks:
    """The clocks of the partitions one session reads, from the committed ones."""

    def __init__(self, committed: Mapping[int, Clock]) -> None:
        self._entries = {p: clock.entries for p, clock in committed.items()}
        #: partition -> the number of its first kept entry
        self._base = {p: clock.base for p, clock in committed.items()}
        #: partition -> the number of the first entry not committed yet
        self._written = {p: c.base + len(self._entries[p]) for p, c in committed.items()}
        self._committed = {p: clock.read for p, clock in committed.items()}
        self._read: dict[int, int] = {}
        #: partition -> the first offset judged on new ground since its clock was committed
        self._unclocked: dict[int, int] = {}

    def judge(self, partition: int, offset: int, now_ms: int) -> int | None:
        """The clock the record at ``offset`` is judged by (records in offset order); None:
        the record is left out. That is a record below the committed read end with no
        committed entry at or before it (read again after the group's offsets were reset
        below where its entries were pruned): its first read's clock is gone, and the
        wall clock of this read would let whichever record pruned it decide its verdict."""
        entries = self._entries.setdefault(partition, [])
        self._read[partition] = offset + 1
        new = offset >= self._committed.get(partition, 0)
        if new:
            self._unclocked.setdefault(partition, offset)
        # the tick this record's OWN read falls in: an entry started by an earlier record
        # would let that record decide whether this one is future (red team 14a, finding 1)
        tick = now_ms - now_ms % TICK_MS
        if new and (not entries or entries[-1][1] != tick):
            entries.append((offset, tick))
        at = bisect_right(entries, (offset, float("inf")))
        # on new ground there is always one, of this read's tick
        return entries[at - 1][1] if at else None

    def read(self, partition: int) -> int:
        """The offset after the last record read on the partition."""
        return self._read.get(partition, self._committed.get(partition, 0))

    def unclocked(self, partition: int, held: int) -> int:
        """The offset the partition may commit without its clock, for ``held``: never past a
        record judged on new ground (its verdict would be committed without the clock it
        was judged by; a replay would judge the records left before it by a later one)."""
        return min(held, self._unclocked.get(partition, held))

    def commit(self, partition: int, held: int) -> ClockCommit | None:
        """The clock to commit with the partition's offset ``held``: the blocks from the one
        holding the latest entry at or before it (the records read again from there are
        judged by it) on, those with new entries written, the earlier ones pruned.
        Written, it is the committed one: the offsets may pass every record read."""
        entries = self._entries.get(partition)
        if not entries:
            return None
        base = self._base.get(partition, 0)
        latest = max(bisect_right(entries, (held, float("inf"))) - 1, 0)
        keep = (base + latest) // BLOCK * BLOCK  # whole blocks
        del entries[: keep - base]
        self._base[partition] = keep
        written, end = max(self._written.get(partition, 0), keep), keep + len(entries)
        new = range(written // BLOCK, -(-end // BLOCK)) if written < end else range(0)
        blocks = {b: tuple(entries[b * BLOCK - keep : (b + 1) * BLOCK - keep]) for b in new}
        self._written[partition] = end
        self._committed[partition] = self.read(partition)
        self._unclocked.pop(partition, None)
        return ClockCommit(blocks, range(base // BLOCK, keep // BLOCK), self.read(partition))

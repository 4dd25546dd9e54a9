"""The committed read clocks: a record's clock is the same on its first read and on a replay."""

from __future__ import annotations

from privstream.aggregates.clocks import BLOCK, TICK_MS, Clock, ClockCommit, ReadClocks
from privstream.aggregates.windows import View, clock_records


def test_a_replayed_record_is_judged_by_the_clock_of_its_first_read() -> None:
    first = ReadClocks({})
    assert [first.judge(0, offset, 0) for offset in range(5)] == [0] * 5
    assert first.judge(0, 5, TICK_MS + 10_000) == TICK_MS  # a new tick: a new entry
    assert first.judge(0, 6, TICK_MS + 20_000) == TICK_MS  # within the tick
    committed = first.commit(0, held=3)
    assert committed == ClockCommit({0: ((0, 0), (5, TICK_MS))}, range(0), read=7)
    view = View()
    for key, value in clock_records(0, committed):
        view.apply(key, value)
    assert view.clocks == {0: Clock({0: ((0, 0), (5, TICK_MS))}, read=7)}  # round-trips
    # a restart a day later reads offsets 3.. again: the clocks of their first read
    later = 86_400_000
    replay = ReadClocks(view.clocks)
    assert [replay.judge(0, offset, later) for offset in range(3, 7)] == [
        0,
        0,
        TICK_MS,
        TICK_MS,
    ]
    assert replay.judge(0, 7, later) == later  # new ground: the wall clock, a new entry


def test_a_commit_keeps_whole_blocks_from_the_latest_entry_at_or_before_the_held_offset() -> None:
    clocks = ReadClocks({})
    for n in range(2 * BLOCK + 4):  # one entry per tick, ten offsets apart
        clocks.judge(1, 10 * n, n * TICK_MS)
    kept = clocks.commit(1, held=10 * (BLOCK + 4) + 5)  # latest entry at or before: BLOCK + 4
    assert kept is not None and kept.pruned == range(0, 1)  # block 0 is wholly before it
    assert sorted(kept.blocks) == [1, 2]
    assert kept.blocks[1][0] == (10 * BLOCK, BLOCK * TICK_MS)
    assert len(kept.blocks[2]) == 4
    assert clocks.commit(2, held=0) is None  # a partition never read: no clock


def test_a_commit_writes_only_the_blocks_with_new_entries() -> None:
    """The clock record never grows with the time a window holds the offsets back: a
    commit writes the blocks holding entries made since the last one (red team 14a)."""
    view = View()
    clocks = ReadClocks({})
    for n in range(3 * BLOCK):
        clocks.judge(0, n, n * TICK_MS)
    for key, value in clock_records(0, clocks.commit(0, held=0) or ClockCommit({}, range(0), 0)):
        view.apply(key, value)
    again = ReadClocks(view.clocks)
    again.judge(0, 3 * BLOCK, 3 * BLOCK * TICK_MS)
    later = again.commit(0, held=0)
    assert later is not None and sorted(later.blocks) == [3] and later.pruned == range(0)
    for key, value in clock_records(0, later):
        view.apply(key, value)
    assert [e[0] for e in view.clocks[0].entries] == list(range(3 * BLOCK + 1))
    assert view.clocks[0].read == 3 * BLOCK + 1


def test_offsets_never_pass_a_record_read_on_new_ground_before_its_clock_is_written() -> None:
    clocks = ReadClocks({0: Clock({0: ((0, 0),)}, read=5)})
    clocks.judge(0, 3, TICK_MS * 2)  # below the committed read end: a replay
    assert clocks.unclocked(0, held=4) == 4
    clocks.judge(0, 5, TICK_MS * 2)  # new ground: its verdict is not committed yet
    clocks.judge(0, 6, TICK_MS * 2)
    assert clocks.unclocked(0, held=7) == 5
    committed = ClockCommit({0: ((0, 0), (5, TICK_MS * 2))}, range(0), read=7)
    assert clocks.commit(0, held=7) == committed
    assert clocks.unclocked(0, held=7) == 7  # the clock written: the offsets may pass them


def test_a_record_below_the_committed_read_end_without_its_entry_is_left_out() -> None:
    """An offset reset reads a pruned record again: no clock of its first read, so no
    verdict by this read's wall clock (which would depend on the record that pruned it)."""
    clocks = ReadClocks({0: Clock({0: ((5, 1_000),)}, read=9)})
    assert clocks.judge(0, 4, TICK_MS * 5) is None  # before the kept entry: left out
    assert clocks.judge(0, 5, TICK_MS * 5) == 1_000
    assert clocks.judge(0, 9, TICK_MS * 5) == TICK_MS * 5  # new ground: the wall clock
    fresh = ReadClocks({})  # a partition that never committed a clock
    assert fresh.judge(3, 0, TICK_MS) == TICK_MS


def test_a_record_on_new_ground_is_judged_by_the_tick_of_its_own_read() -> None:
    """An entry started by an earlier record never judges a record read in a later tick:
    the earlier record's presence would decide the later one's verdict (red team 14a)."""
    with_q, without_q = ReadClocks({}), ReadClocks({})
    assert with_q.judge(0, 0, 30_000) == 0  # q, read at 30 s: tick 0
    assert with_q.judge(0, 1, 80_000) == without_q.judge(0, 1, 80_000) == TICK_MS

"""The committed read clocks: a record's clock is the same on its first read and on a replay."""

from __future__ import annotations

from privstream.aggregates.clocks import TICK_MS, Clock, ReadClocks
from privstream.aggregates.windows import View, clock_record


def test_a_replayed_record_is_judged_by_the_clock_of_its_first_read() -> None:
    first = ReadClocks({})
    assert [first.judge(0, offset, 0) for offset in range(5)] == [0] * 5
    assert first.judge(0, 5, TICK_MS + 10_000) == TICK_MS  # a new tick: a new entry
    assert first.judge(0, 6, TICK_MS + 20_000) == TICK_MS  # within the tick
    committed = first.commit(0, held=3)
    assert committed == Clock(((0, 0), (5, TICK_MS)), read=7)
    view = View()
    view.apply(*clock_record(0, committed))
    assert view.clocks == {0: committed}  # the record round-trips
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


def test_a_commit_keeps_the_latest_entry_at_or_before_the_held_offset() -> None:
    clocks = ReadClocks({})
    for offset, now in ((0, 0), (10, TICK_MS), (20, 2 * TICK_MS), (30, 3 * TICK_MS)):
        clocks.judge(1, offset, now)
    kept = clocks.commit(1, held=25)
    assert kept is not None and kept.entries == ((20, 2 * TICK_MS), (30, 3 * TICK_MS))
    assert clocks.commit(2, held=0) is None  # a partition never read: no clock


def test_offsets_never_pass_a_record_read_on_new_ground_before_its_clock_is_written() -> None:
    clocks = ReadClocks({0: Clock(((0, 0),), read=5)})
    clocks.judge(0, 3, TICK_MS * 2)  # below the committed read end: a replay
    assert clocks.unclocked(0, held=4) == 4
    clocks.judge(0, 5, TICK_MS * 2)  # new ground: its verdict is not committed yet
    clocks.judge(0, 6, TICK_MS * 2)
    assert clocks.unclocked(0, held=7) == 5
    assert clocks.commit(0, held=7) == Clock(((5, TICK_MS * 2),), read=7)
    assert clocks.unclocked(0, held=7) == 7  # the clock written: the offsets may pass them


def test_a_record_below_the_committed_read_end_without_its_entry_is_left_out() -> None:
    """An offset reset reads a pruned record again: no clock of its first read, so no
    verdict by this read's wall clock (which would depend on the record that pruned it)."""
    clocks = ReadClocks({0: Clock(((5, 1_000),), read=9)})
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

"""Red team 13c: failing tests against the streaming aggregates of branch i34-fix2 (681bf23).

Pure (no Kafka): the worker's steps (``worker/aggregates.py``) are replayed with
``OpenWindows`` as ``_Step._close`` / ``_Step._release`` call it. Each test states the
claim it checks (docs/proofs/aggregates.md, step 19) and fails on the code as branched.
"""

from __future__ import annotations

import json

from privstream.aggregates import build_aggregates
from privstream.aggregates.stream import OpenWindows
from privstream.aggregates.windows import View, decode_partial, epoch_record

from tests.support.aggregates import aggregates_config

WINDOW = {"size_seconds": 10, "grace_seconds": 2}
COUNT = {"name": "n", "query": "histogram", "field": "os", "epsilon": 1.0}
NOW = 1_000_500  # ms: the deployment's epoch; window [1000 s, 1010 s) is open
FUTURE = NOW + 360_000  # more than MAX_FUTURE_MS (5 min) past NOW: a future record
LATER = NOW + 70_000  # the restart: FUTURE is within 5 min of it


def _record(os_name: str) -> bytes:
    return json.dumps({"user": "x", "os": os_name}).encode()


def _apply(view: View, writes: list) -> None:
    for key, value in writes:
        view.apply(key, value)


def _session_counts(with_victim: bool, *, release_first: bool) -> dict:
    """One partition (0), read by the worker that owns it (the releaser).

    ``release_first`` False: the deployment's first transaction (marker, count, epoch and
    epoch records: ``_Step._close`` with ``_pending``) commits the input offsets at
    ``held`` while nothing closes on the partition, so ``close`` returns no clock record.
    True: a window closed (clock committed), then the records below were read, and the
    release transaction (``_Step._release``: rows, marker, tombstones, ``held(0, position)``)
    commits partition 0's offsets, with no clock record either.
    """
    (plan,) = build_aggregates(aggregates_config({**COUNT, "window": WINDOW, "output_topic": "a"}))
    view = View()
    view.apply(*epoch_record(NOW))
    session = OpenWindows((plan,), view)
    log: list[tuple[int, str]] = []
    now = NOW
    if release_first:
        log.append((NOW, "ios"))  # z: its window closes at 1012 s
        session.add(0, 0, NOW, _record("ios"), NOW, misplaced=False)
        now = 1_012_500
        _apply(view, session.close(0, now))  # [1000 s, 1010 s) closes: clock committed
    base = len(log)
    if with_victim:
        log.append((now, "web"))  # the victim's record: its window is still open
    log.append((FUTURE, "android"))  # u: future when first read, left out
    for offset in range(base, len(log)):
        stamp, os_name = log[offset]
        session.add(0, offset, stamp, _record(os_name), now, misplaced=False)
    if not release_first:
        _apply(view, session.close(0, now))  # nothing closes: the epoch records only
    committed = session.held(0, len(log))  # the transaction's offset commit of partition 0
    # a crash or a rebalance 70 s later: read again from the committed offset
    restarted = OpenWindows((plan,), view)
    for offset in range(committed, len(log)):
        stamp, os_name = log[offset]
        restarted.add(0, offset, stamp, _record(os_name), LATER, misplaced=False)
    _apply(view, restarted.close(0, FUTURE + 20_000))  # every window closes
    start = FUTURE - FUTURE % 10_000
    found = [decode_partial("n", "w", v) for _, v in view.inputs("n", start).values()]
    return {cell: n for part in found for cell, n in part.counts.items()}


def test_an_offset_commit_without_the_clock_lets_another_record_decide_a_future_record() -> None:
    """Finding 1 (HIGH). Step 19: a record's verdict is the same on every read, so no
    other record decides it. The clock is committed only by a ``close`` that closes a
    window on the partition (``OpenWindows.close``: ``if closing``), but the worker commits
    the partition's input offsets in other transactions too: the deployment's first one
    (markers), the release transaction (partition 0), and any close of ANOTHER partition
    (a partition still replaying, or whose progress is ahead). The offset moves past the
    future record ``u`` only if no open window holds it: with the victim's record (another
    window) it is held before ``u``, the committed read end is not, and the restart judges
    ``u`` by its own later clock and counts it. Without the victim, ``u`` is never read
    again. Removing the victim changes a window it is not in, by ``u``."""
    with_victim = _session_counts(with_victim=True, release_first=False)
    without = _session_counts(with_victim=False, release_first=False)
    assert with_victim == without, (
        f"first transaction: the victim's record (not in u's window) changed u's window: "
        f"{with_victim} with it, {without} without"
    )


def test_a_release_transaction_without_the_clock_lets_another_record_decide() -> None:
    """Finding 1, the releaser's steady state: partition 0's offsets are committed by the
    release transaction (``_Step._release``), which writes no clock record."""
    with_victim = _session_counts(with_victim=True, release_first=True)
    without = _session_counts(with_victim=False, release_first=True)
    assert with_victim == without, (
        f"release transaction: the victim's record (not in u's window) changed u's window: "
        f"{with_victim} with it, {without} without"
    )


def _plan(name: str = "n") -> tuple:
    return build_aggregates(
        aggregates_config({**COUNT, "name": name, "window": WINDOW, "output_topic": "a"})
    )


def _offset_reset_counts(with_z: bool) -> dict:
    """One partition: ``u`` (offset 0) is future when first read and left out; ``z``
    (offset 1, read a minute later) starts a new clock entry, and the close's commit
    prunes the entries to the latest at or before the held offset, dropping ``u``'s.
    The operator then resets the aggregates group's offsets to the earliest
    (``kafka-consumer-groups.sh --reset-offsets --to-earliest``, or deletes the group
    alone): offset 0 is read again, below the committed read end, with no entry at or
    before it, so ``ReadClocks.judge`` falls back to the wall clock of the replay."""
    (plan,) = _plan()
    view = View()
    view.apply(*epoch_record(NOW))
    session = OpenWindows((plan,), view)
    log = [(FUTURE, "android", NOW)]  # u
    if with_z:
        log.append((NOW + 61_000, "ios", NOW + 61_000))  # z, read 61 s later
    for offset, (stamp, os_name, read_at) in enumerate(log):
        session.add(0, offset, stamp, _record(os_name), read_at, misplaced=False)
    _apply(view, session.close(0, NOW + 75_000))  # closes up to 1070 s: clock committed
    # the offsets reset to 0; the session restarts 80 s after u's first read
    restarted = OpenWindows((plan,), view)
    for offset, (stamp, os_name, _) in enumerate(log):
        restarted.add(0, offset, stamp, _record(os_name), NOW + 80_000, misplaced=False)
    _apply(view, restarted.close(0, FUTURE + 20_000))
    start = FUTURE - FUTURE % 10_000
    found = [decode_partial("n", "w", v) for _, v in view.inputs("n", start).values()]
    return {cell: n for part in found for cell, n in part.counts.items()}


def test_an_offset_reset_judges_a_pruned_record_anew_depending_on_another_record() -> None:
    """Finding 3 (MEDIUM). Step 19: "a record counted in, or left out of, a committed
    partial is judged alike on every read". ``u`` was left out on its first read; read
    again after an offset reset it is judged by the replay's wall clock (its entry was
    pruned) and counted, but only if ``z`` (another window) made the entry that pruned
    u's. Without ``z`` u's entry is kept and u stays out."""
    with_z = _offset_reset_counts(with_z=True)
    without = _offset_reset_counts(with_z=False)
    assert with_z == without == {}, (
        f"after an offset reset, z's presence decided u's verdict: {with_z} with z, "
        f"{without} without"
    )


def test_a_name_added_by_a_worker_whose_clock_is_behind_releases_a_released_record() -> None:
    """Finding 2 (MEDIUM). Step 16, across names: a new name's first window is
    ``aligned_up(now)`` of the session that first sees it, taken as past every window
    another name released. A worker whose wall clock is behind (an NTP step, a skewed VM)
    by more than a window and its grace puts the new name's first window before windows
    the old name released, and counts their records again when it reads them (a
    released window's record after the held offset: records interleave across windows)."""
    (old,) = _plan("n")
    view = View()
    view.apply(*epoch_record(NOW))
    session = OpenWindows((old,), view)
    session.add(0, 0, 1_010_500, _record("web"), 1_010_500, misplaced=False)  # s: open window
    session.add(0, 1, NOW, _record("ios"), 1_010_500, misplaced=False)  # r: [1000 s, 1010 s)
    _apply(view, session.close(0, 1_012_500))  # r's window closes (and is released)
    assert {
        c: n
        for _, v in view.inputs("n", 1_000_000).values()
        for c, n in decode_partial("n", "w", v).counts.items()
    } == {("ios",): 1}
    held = session.held(0, 2)
    assert held == 0  # s's window holds the committed offset: r is read again
    # the config renames n to m; the restart runs on a worker whose clock is 30 s behind
    (new,) = _plan("m")
    renamed = OpenWindows((new,), view)
    skewed = 1_012_500 - 30_000
    for offset, (stamp, os_name) in enumerate([(1_010_500, "web"), (NOW, "ios")]):
        renamed.add(0, offset, stamp, _record(os_name), skewed, misplaced=False)
    _apply(view, renamed.close(0, skewed))  # m's epoch record: aligned_up(skewed)
    _apply(view, renamed.close(0, 1_030_000))  # the clock caught up: m's windows close
    again = {
        c: n
        for _, v in view.inputs("m", 1_000_000).values()
        for c, n in decode_partial("m", "w", v).counts.items()
    }
    assert again == {}, f"r, released under n, is counted again under m: {again}"

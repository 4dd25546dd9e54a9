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

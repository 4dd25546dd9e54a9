"""Red team 14a: failing tests against the streaming aggregates of branch i34-land (c9f8999).

Pure (no Kafka): the worker's steps (``worker/aggregates.py``) are replayed with
``OpenWindows`` / ``releases`` as ``_Step._close`` / ``_Step._release`` call them. Each
test states the claim it checks and fails on the code as branched, except the model of
the lead's open item (a rolling rename with an old replica's clock ahead), which passes:
it is reproduced only with finding 4's Kafka interleaving.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from privstream.aggregates import KeyedCells, build_aggregates
from privstream.aggregates.deployments import refuse_recreated_input
from privstream.aggregates.stream import OpenWindows, releases
from privstream.aggregates.windows import View, decode_partial, epoch_record, window_label
from privstream.config.models import KafkaConfig
from privstream.errors import ChangelogError

from tests.support.aggregates import aggregates_config

COUNT = {"name": "n", "query": "histogram", "field": "os", "epsilon": 1.0}
MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR


def _record(os_name: str) -> bytes:
    return json.dumps({"user": "x", "os": os_name}).encode()


def _apply(view: View, writes: list) -> None:
    for key, value in writes:
        view.apply(key, value)


def test_the_clock_record_stays_under_the_producers_record_limit() -> None:
    """Finding 2 (MEDIUM-HIGH, liveness). Step 15: "every close transaction can be
    committed whatever the records hold" (partials are chunked for that). The partition's
    clock record is not: it holds one entry per ``TICK_MS`` (a minute) of records read
    since the oldest open window's first record (``ReadClocks.commit`` prunes only below
    the held offset). With an hourly and a monthly aggregate (a 31-day window) over an
    input read at least once a minute, every hourly close writes the clock entries since
    the month's first record: about 27 bytes each with 10-digit offsets, past the default
    ``kafka.max_message_bytes`` (1 MiB, the producer's ``max_request_size``) after ~27
    days. From then on every close transaction fails (MessageSizeTooLargeError, retried
    forever): no window of any aggregate closes or is released again and the input
    offsets never move, with ordinary traffic and no hostile producer."""
    hourly, monthly = build_aggregates(
        aggregates_config(
            {**COUNT, "name": "hourly", "window": {"size_seconds": 3600}, "output_topic": "a"},
            {
                **COUNT,
                "name": "monthly",
                "window": {"size_seconds": 31 * 86_400},
                "output_topic": "a",
            },
        )
    )
    month = 31 * DAY
    epoch = (1_795_000_000_000 // month) * month + MINUTE  # just after a month began
    view = View()
    view.apply(*epoch_record(epoch))
    windows = OpenWindows((hourly, monthly), view)
    limit = KafkaConfig.model_fields["max_message_bytes"].default
    offset = 2_000_000_000  # a partition a few billion records in
    largest, kind = 0, b""
    for minute in range(30 * 24 * 60):  # 30 days, one record read per minute
        now = epoch + minute * MINUTE
        windows.add(0, offset + minute * 100, now, _record("ios"), now, misplaced=False)
        if minute % (24 * 60) == 0 or minute == 30 * 24 * 60 - 1:  # a close a day suffices
            writes = windows.close(0, now)
            _apply(view, writes)
            for key, value in writes:
                if len(value or b"") > largest:
                    largest, kind = len(value or b""), key
    assert largest <= limit, (
        f"a close writes a {largest}-byte record ({kind!r}), past kafka.max_message_bytes={limit}: "
        "the close transaction can never commit"
    )


def _hourly() -> tuple:
    return build_aggregates(
        aggregates_config(
            {**COUNT, "window": {"size_seconds": 3600, "grace_seconds": 300}, "output_topic": "a"}
        )
    )


def _deployment(
    epoch: int, log: list[tuple[int, str, int]], close_at: int, *, after: bool = False
) -> dict[str, list]:
    """A deployment over one input partition from a fresh internal topic and group (the
    group reads the input from its beginning): the records ``(timestamp, os, read at)``,
    every window closed at ``close_at`` by its worker's clock, then released; the rows by
    window label. ``after``: the output topic holds an earlier deployment's rows (the
    worker reads its end offsets while nothing has closed: ``View.released_elsewhere``)."""
    plans = _hourly()
    view = View(released_elsewhere=after)
    view.apply(*epoch_record(epoch))
    windows = OpenWindows(plans, view)
    for offset, (stamp, os_name, read_at) in enumerate(log):
        windows.add(0, offset, stamp, _record(os_name), read_at, misplaced=False)
    _apply(view, windows.close(0, close_at))
    out: dict[str, list] = {}
    for done in releases(plans, view, KeyedCells(bytes(32), "raw"), partitions=1):
        out[done.label] = done.rows
    return out


def test_retiring_the_state_never_releases_a_window_twice_whatever_the_clocks() -> None:
    """Finding 3 (MEDIUM). docs/aggregates.md, Adding partitions: after retiring the
    aggregates' state (internal topic and group deleted) "every record stamped before the
    new epoch's window is left out, and every window the old state released ended at or
    before it: no record is released twice". The new epoch's first window is the one
    HOLDING its epoch (``OpenWindows._first``, ``fresh``), and nothing of the old state is
    left to bound it, so it rests on the two workers' clocks agreeing within the grace: the
    old worker (clock 10 min ahead, grace 5 min) released [12:00, 13:00) at real 12:55:30;
    the operator retires the state and restarts on a host with the right clock at 12:57.
    The new epoch's window is [12:00, 13:00) again; the new group reads the input from its
    beginning and releases it a second time, with the records since 12:55:30 too, so its
    totals, and so its keyed noise, differ: two noisy releases of one window's records.
    The same clock skew under a rename is refused since red team 13c (finding 2)."""
    noon = (1_795_000_000_000 // DAY) * DAY + 12 * HOUR
    ahead = 10 * MINUTE
    r = (noon + 30 * MINUTE, "ios", noon + 30 * MINUTE)
    old = _deployment(noon - HOUR, [r], close_at=noon + 55 * MINUTE + 30_000 + ahead)
    assert window_label(noon, HOUR) in old  # [12:00, 13:00) released by the old state
    late = (noon + 58 * MINUTE, "web", noon + 58 * MINUTE)  # after the old release
    restart = noon + 57 * MINUTE
    new = _deployment(
        restart, [(r[0], r[1], restart), late], close_at=noon + 66 * MINUTE, after=True
    )
    twice = sorted(set(old) & set(new))
    assert not twice, (
        f"window {twice} released by the retired state and again by the new epoch "
        f"(values {[row['value'] for row in old[twice[0]]]} then "
        f"{[row['value'] for row in new[twice[0]]]})"
    )


def test_a_hostile_producer_cannot_stall_the_aggregates_under_a_lower_record_limit() -> None:
    """Finding 5 (MEDIUM, liveness + a hostile producer). ``kafka.max_message_bytes`` (the
    producer's ``max_request_size``) may be set from 1 KiB up (a broker or a managed
    cluster with a lower ``message.max.bytes``), but partials are chunked at a fixed
    ``CHUNK_BYTES`` (512 KiB). With 256 KiB and ``select_groups``, a producer sending some
    thousands of distinct group keys in one window makes a chunk the producer refuses:
    every close transaction fails and is retried forever (the aggregates of every name
    stall, the input offsets never move), and the retry's warning (``describe(exc)``,
    aiokafka's MessageSizeTooLargeError) logs the chunk's exact size, a function of how
    many distinct groups the records held (step 19: no log line carries a count)."""
    base = aggregates_config(
        {
            "name": "v",
            "query": "count",
            "group_by": [{"field": "version"}],
            "select_groups": True,
            "epsilon": 1.0,
            "delta": 1e-6,
            "window": {"size_seconds": 10},
            "output_topic": "agg",
        }
    )
    limit = 256 * 1024
    config = base.model_copy(
        update={"kafka": base.kafka.model_copy(update={"max_message_bytes": limit})}
    )
    view = View()
    view.apply(*epoch_record(0))
    windows = OpenWindows(build_aggregates(config), view)
    for i in range(20_000):
        value = json.dumps({"version": f"hostile-version-{i:08d}"}).encode()
        windows.add(0, i, 1_000, value, 0, misplaced=False)
    sizes = [len(key) + len(value or b"") for key, value in windows.close(0, 12_000)]
    assert max(sizes) <= config.kafka.max_message_bytes, (
        f"a close writes a {max(sizes)}-byte internal record, past "
        f"kafka.max_message_bytes={config.kafka.max_message_bytes}: never committed"
    )


def _attacked_window(with_victim: bool, attackers: int = 5) -> dict:
    """One quiet partition (no clock entry in the last minute). The victim's record ``q``
    (it enters no aggregate: no ``os``) is read at ``T``; 50 s later the attacker's
    records are read, stamped 5 min 30 s past ``T``: within ``MAX_FUTURE_MS`` of their own
    read, beyond it from ``T``. The committed counts of the attacker's window."""
    (plan,) = build_aggregates(
        aggregates_config({**COUNT, "window": {"size_seconds": 10}, "output_topic": "a"})
    )
    t = 1_000_500
    view = View()
    view.apply(*epoch_record(t))
    windows = OpenWindows((plan,), view)
    offset = 0
    if with_victim:
        victim = json.dumps({"user": "victim"}).encode()
        windows.add(0, offset, t, victim, t, misplaced=False)
        offset += 1
    stamp = t + 5 * MINUTE + 30_000
    for i in range(attackers):
        attacker = json.dumps({"user": f"a{i}", "os": "android"}).encode()
        windows.add(0, offset + i, stamp, attacker, t + 50_000, misplaced=False)
    _apply(view, windows.close(0, stamp + 20_000))  # every window closes
    start = stamp - stamp % 10_000
    found = [decode_partial("n", "w", v) for _, v in view.inputs("n", start).values()]
    return {cell: n for part in found for cell, n in part.counts.items()}


def test_a_record_that_enters_no_aggregate_does_not_decide_whether_others_are_future() -> None:
    """Finding 1 (HIGH). Step 19: "(a) to (c) are functions of the record itself ... and
    of the wall clock at which it is first read; none reads another record", so for
    ``D`` and ``D + u`` read at the same times every other record is treated alike. But
    (a) is judged by the partition's latest clock ENTRY (``ReadClocks.judge``), and an
    entry is started only by a record read when the last entry is ``TICK_MS`` old: on a
    partition quiet for a minute, the victim's record ``q`` starts the entry, and every
    record read in the next minute is judged by ``q``'s read time, not its own. The
    attacker's k records stamped between ``q``'s clock + 5 min and their own + 5 min are
    then future (left out) with ``q`` and counted without it: ``q``'s presence (a record
    that enters no aggregate at all: unreadable, late, misplaced, another field) moves
    a window it is not in by k, against noise calibrated for one unit."""
    with_victim = _attacked_window(with_victim=True)
    without = _attacked_window(with_victim=False)
    assert with_victim == without, (
        f"the victim's record (in no aggregate) changed the attacker's window: "
        f"{with_victim} with it, {without} without"
    )


def _transaction_after_a_removal(had_records: bool) -> list:
    """Aggregate ``x`` closed a window on partition 1 (its partial committed, not released:
    partition 0 had not closed it) and was then removed from the config. The restarted
    session's close of partition 1 at a step where no window closes: what it writes."""
    (x,) = build_aggregates(
        aggregates_config(
            {**COUNT, "name": "x", "window": {"size_seconds": 10}, "output_topic": "a"}
        )
    )
    view = View()
    view.apply(*epoch_record(1_000_500))
    first = OpenWindows((x,), view)
    if had_records:
        first.add(1, 0, 1_000_500, _record("ios"), 1_000_500, misplaced=False)
    _apply(view, first.close(1, 1_010_500))  # [1000 s, 1010 s) closes on partition 1 only
    (kept,) = build_aggregates(
        aggregates_config(
            {**COUNT, "name": "n", "window": {"size_seconds": 10}, "output_topic": "a"}
        )
    )
    restarted = OpenWindows((kept,), view)
    _apply(view, restarted.close(0, 1_011_000))  # the first close (partition 0): the epoch records
    return restarted.close(1, 1_011_500)  # partition 1 past its replay: nothing closes


def test_whether_a_transaction_commits_does_not_tell_whether_a_partition_had_records() -> None:
    """Finding 7 (LOW). Step 19: "nothing unnoised about records leaves the worker but the
    release schedule". The tombstones of a removed name's committed partials
    (``View.never_due``) are written at the partition's first close, even when nothing
    else is: ``_Step._close`` then commits a transaction (``privstream_transactions_total
    {outcome="committed"}`` +1, and one more transaction in the internal topic) only if
    the partition had a record in a closed, unreleased window of that name (an empty
    partial is no record). One bit per partition per removal, outside the noise."""
    assert _transaction_after_a_removal(True) == _transaction_after_a_removal(False), (
        "a close step writes (and so commits a transaction) only when the partition had "
        "records in the removed aggregate's window"
    )


def test_a_recreated_input_topic_is_refused_not_left_out_silently() -> None:
    """Finding 6 (LOW-MEDIUM, liveness). docs/operations.md: a re-created raw topic needs a
    new ``kafka.noise_domain`` and nothing else. The internal topic keeps the old input's
    committed read clock (read end 1,000,000 here); the new input starts at offset 0, the
    group's out-of-range offsets reset to it, and every record below the OLD read end is
    taken for a replay whose clock entry was pruned (``ReadClocks.judge`` returns none):
    left out, silently, while its offset is committed, until the new topic has as many
    records as the old one had (maybe never): the windows are released without them.
    (Fixed by refusing the session, exit 2, while the partition's log ends before the
    committed read end: the test asserted the red team's other remedy, counting again.)"""
    (plan,) = build_aggregates(
        aggregates_config({**COUNT, "window": {"size_seconds": 10}, "output_topic": "a"})
    )
    t = 1_000_500
    view = View()
    view.apply(*epoch_record(t))
    old = OpenWindows((plan,), view)
    old.add(0, 999_999, t, _record("ios"), t, misplaced=False)  # the old input's last record
    _apply(view, old.close(0, t + 20_000))  # its window closes: clock read end 1,000,000
    assert view.clocks[0].read == 1_000_000
    refuse_recreated_input(view, {0: 1_000_000}, "raw", "g.aggregates")  # the same topic
    # the input topic is deleted and re-created; the worker restarts, the log ends at 1
    with pytest.raises(ChangelogError, match=r"'raw' partition 0 ends at offset 1, before"):
        refuse_recreated_input(view, {0: 1}, "raw", "g.aggregates")


def _named(name: str) -> tuple:
    return build_aggregates(
        aggregates_config(
            {
                **COUNT,
                "name": name,
                "window": {"size_seconds": 10, "grace_seconds": 2},
                "output_topic": "a",
            }
        )
    )


def _copy(view: View) -> View:
    """What a replica reads: the topic's state at one moment, its own copy."""
    return copy.deepcopy(view)


def test_a_rolling_rename_with_an_old_replica_clock_ahead_releases_no_range_twice() -> None:
    """The lead's open item (NOT reproduced; a regression test that passes). Two input
    partitions; a rolling deploy renames ``n`` to ``m``. After the rebalance the old
    replica (config ``n``, clock 30 s ahead: more than a window and its grace) owns
    partition 0 and releases; the new replica (``m``) owns partition 1 and writes ``m``'s
    start from the same committed view. The old replica goes on closing ``n`` with its
    cached first window and a stale view (no rebase), but ``n`` is due only up to
    ``min`` over the partitions of its progress, and the new replica never advances
    ``n``'s progress on partition 1, which ``m``'s start is already past (``last_closed``).
    Then the rollout ends (partition 0 to a new replica) and ``m`` releases. No time range
    is released under both names. A double release needs the new replica's view to miss a
    committed ``progress`` of ``n`` on its own partition (report: a transaction whose
    TxnOffsetCommit was accepted under the old generation, its records appended after the
    new owner's read of the topic's stable end): not modelled here."""
    (n,), (m,) = _named("n"), _named("m")
    noise = KeyedCells(bytes(32), "raw")
    topic = View()
    topic.apply(*epoch_record(1_000_500))
    released: list[tuple[str, int, int]] = []

    def release(plan: Any, view: View) -> None:
        for done in releases((plan,), view, noise, partitions=2):
            released.append((plan.name, done.end_ms - 10_000, done.end_ms))
            _apply(view, done.writes)
            _apply(topic, done.writes)

    old = OpenWindows((n,), topic)  # before the deploy: one replica owns both partitions
    for p in (0, 1):
        old.add(p, 0, 1_001_000, _record("ios"), 1_001_000, misplaced=False)
        _apply(topic, old.close(p, 1_022_500))
    release(n, topic)
    ahead = 30_000
    at = 1_025_000  # the rebalance: both replicas read the same committed view
    old_view, new_view = _copy(topic), _copy(topic)
    old_r, new_r = OpenWindows((n,), old_view), OpenWindows((m,), new_view)
    for step in range(6):
        now = at + step * 5_000
        new_r.add(1, 10 + step, now, _record("web"), now, misplaced=False)
        writes = new_r.close(1, now)
        _apply(new_view, writes)
        _apply(topic, writes)
        old_r.add(0, 10 + step, now, _record("ios"), now + ahead, misplaced=False)
        writes = old_r.close(0, now + ahead)
        _apply(old_view, writes)
        _apply(topic, writes)
        release(n, old_view)  # stale: never rebased
    later = at + 60_000  # the rollout ends: partition 0 to a new replica too
    final = OpenWindows((m,), topic)
    for p in (0, 1):
        _apply(topic, final.close(p, later))
    release(m, topic)
    spans = {name: [(s, e) for x, s, e in released if x == name] for name in ("n", "m")}
    overlaps = [(a, b) for a in spans["n"] for b in spans["m"] if a[0] < b[1] and b[0] < a[1]]
    # the old replica's clock carried n's progress on partition 0 past m's start
    assert topic.progress["n", 0] > topic.starts["m"].start
    assert spans["m"], "m released nothing: the test exercises nothing"
    assert not overlaps, f"released under both names: {overlaps}"


def _true_counts(view: View, name: str, start: int) -> dict[tuple[Any, ...], int]:
    found = [decode_partial(name, "w", v) for _, v in view.inputs(name, start).values()]
    return {cell: n for part in found for cell, n in part.counts.items()}


def test_a_restart_that_misses_its_predecessors_last_transaction_releases_once() -> None:
    """Finding 4 (MEDIUM, conditional on a Kafka interleaving; the lead's open item). The
    old replica (config ``n``, clock 30 s ahead) owns both partitions in generation N; its
    last close transaction T1 (``r``'s window closed on partition 1 by its clock, offsets
    committed past ``r``) has its TxnOffsetCommit accepted under generation N while the
    rebalance is only preparing, and its internal records reach the log after the new
    replica (config ``m``, owner of partition 1 in N+1) read the topic's stable end: the
    new replica's view and its committed offset (``consumer.committed``: OffsetFetch
    without ``require_stable``, unlike the record path's ``stable_offsets``) both predate
    T1. ``m``'s start (``aligned_up(max(now, L))``, L without T1's progress) is then
    before ``r``'s window, ``r`` is read again and counted under ``m``, while the old
    replica (owner of partition 0 in N+1, whose restart read includes T1) releases
    ``r``'s window under ``n``: one record in two releases with independent noise.
    Reading the committed offsets with ``require_stable`` (waiting T1 out) before
    ``read_view`` closes the gap."""
    (n,), (m,) = _named("n"), _named("m")
    noise = KeyedCells(bytes(32), "raw")
    topic = View()
    topic.apply(*epoch_record(980_500))
    rows: dict[str, dict[int, list[Any]]] = {"n": {}, "m": {}}

    def release(plan: Any, view: View) -> None:
        for done in releases((plan,), view, noise, partitions=2):
            rows[plan.name][done.end_ms - 10_000] = done.rows
            _apply(view, done.writes)
            _apply(topic, done.writes)

    old = OpenWindows((n,), topic)
    for p in (0, 1):  # before the deploy: [980 s, 990 s) closed and released
        _apply(topic, old.close(p, 992_500))
    release(n, topic)
    ahead, t1 = 30_000, 1_003_000  # real time of T1; the old replica's clock reads +30 s
    r = (1_015_000, "android")  # on partition 1, stamped within 5 min of the wall clock
    old.add(1, 0, r[0], _record(r[1]), t1 + ahead, misplaced=False)
    before_t1 = _copy(topic)  # what the new replica reads, and its offset 0 on partition 1
    for p in (0, 1):
        _apply(topic, old.close(p, t1 + ahead))  # T1: closes up to 1030 s, committed late
    assert old.held(1, 1) == 1  # T1 commits partition 1's offsets past r
    assert _true_counts(topic, "n", 1_010_000) == {("android",): 1}
    release(n, _copy(topic))  # the old replica, partition 0's owner in N+1: includes T1
    assert 1_010_000 in rows["n"]
    new_view = before_t1
    new_r = OpenWindows((m,), new_view)
    new_r.add(1, 0, r[0], _record(r[1]), t1, misplaced=False)  # r read again
    writes = new_r.close(1, t1)  # m's start: aligned_up(max(t1, 990 s)) = 1010 s
    _apply(new_view, writes)
    _apply(topic, writes)
    now = 1_023_000  # the rollout ends (m everywhere); r's window closes
    _apply(topic, new_r.close(1, now))
    _apply(topic, OpenWindows((m,), topic).close(0, now))
    assert _true_counts(topic, "m", 1_010_000) == {("android",): 1}  # r again
    release(m, topic)
    both = sorted(set(rows["n"]) & set(rows["m"]))
    assert not both, f"window {both} released under n and again under m (r in both)"

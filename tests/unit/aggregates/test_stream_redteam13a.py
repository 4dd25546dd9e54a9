"""Red team 13a: failing tests against the streaming aggregates of merge 684cdac.

Each test states the claim it checks (docs/proofs/aggregates.md, steps 1, 18-20) and
fails on the code as merged. Pure (no Kafka): the worker's steps are replayed with
``OpenWindows``, ``misplaced_records`` and ``releases`` as ``worker/aggregates.py``
calls them.
"""

from __future__ import annotations

import json
from functools import reduce
from typing import Any

import pytest
from aiokafka.structs import ConsumerRecord
from privstream.aggregates import KeyedCells, Partial, build_aggregates, merge
from privstream.aggregates.stream import OpenWindows, releases
from privstream.aggregates.windows import View, decode_partial, epoch_record
from privstream.worker.aggregate_input import misplaced_records

from tests.support.aggregates import aggregates_config

WINDOW = {"size_seconds": 10, "grace_seconds": 2}
COUNT = {"name": "n", "query": "histogram", "field": "os", "epsilon": 1.0}


def _plans(records_per_group: int = 1) -> tuple:
    bounds = {"records_per_group": records_per_group, "groups_per_subject": 1}
    config = aggregates_config(
        {**COUNT, "window": WINDOW, "output_topic": "agg", "contribution": bounds},
        subject="user",
    )
    return build_aggregates(config)


def _view() -> View:
    view = View()
    view.apply(*epoch_record(0))
    return view


def _message(partition: int, offset: int, value: bytes) -> ConsumerRecord:
    return ConsumerRecord("in", partition, offset, 0, 0, None, value, None, 0, len(value), ())


def _feed(windows: OpenWindows, partition: int, values: list[bytes], partitions: int) -> None:
    """One batch of a partition, as ``_Step.run`` adds it (misplaced by the ledger's rule)."""
    batch = [_message(partition, i, v) for i, v in enumerate(values)]
    wrong = misplaced_records(batch, partition, partitions, "user")
    for m, misplaced in zip(batch, wrong, strict=True):
        windows.add(partition, m.offset, 1_000, m.value, 0, misplaced=misplaced)


def _commit(windows: OpenWindows, view: View, partition: int, now: int) -> None:
    for key, value in windows.close(partition, now):
        view.apply(key, value)


def _counts(view: View, start: int) -> dict:
    parts = [decode_partial("n", "w", value) for _, value in view.inputs("n", start).values()]
    return dict(reduce(merge, parts, Partial("n", "w")).counts)


def _record(user: Any, os_name: str = "ios") -> bytes:
    return json.dumps({"user": user, "os": os_name}).encode()


def test_a_subject_sent_as_an_integer_and_as_a_string_counts_once() -> None:
    """Finding 1. Step 1: a subject's records are bounded together. The home partition
    (``misplaced_records``: the ledger's canonical bytes) takes ``7`` and ``"7"`` as ONE
    subject (``b"7"``, docs/ledger.md), so both records sit on one partition; the
    accumulator's ``RecordReader.identity`` (canonical JSON) takes them as two, and
    admits a record per cell (and a cell) for each: 2x the bound the noise is calibrated
    for (records_per_group 1, groups_per_subject 1: one record)."""
    (plan,) = _plans()
    view = _view()
    windows = OpenWindows((plan,), view)
    _feed(windows, 0, [_record(7, "ios"), _record("7", "ios"), _record("7", "web")], 1)
    _commit(windows, view, 0, 12_000)
    counted = sum(_counts(view, 0).values())
    assert counted <= 1, (
        f"subject 7 (sent as 7 and as '7', one subject to the ledger and one home "
        f"partition) put {counted} records into a window bounded at 1: {_counts(view, 0)}"
    )


@pytest.mark.parametrize("user", [True, 7.5, "", [7], {"id": 7}])
def test_a_subject_the_ledger_cannot_read_is_not_counted_on_every_partition(user: Any) -> None:
    """Finding 2. Step 20: every counted record of a subject sits on one partition. A
    subject value with no canonical bytes (``true``, a float, ``""``, a list, an object:
    ``subject_column`` gives None, the ledger's ``no_subject``) is never misplaced, yet the
    accumulator counts it as a subject (its JSON): a producer sending it to P partitions
    gets P times the bound (the red-team-12b finding 6, through another door)."""
    (plan,) = _plans()
    view = _view()
    windows = OpenWindows((plan,), view)
    for partition in (0, 1):
        _feed(windows, partition, [_record(user)], 2)
        _commit(windows, view, partition, 12_000)
    counted = sum(_counts(view, 0).values())
    assert counted <= 1, (
        f"subject {user!r} counted {counted} times (once per partition) against a bound of 1"
    )


NOW = 1_000_500  # ms; window [1_000_000, 1_010_000) is open, [990_000, 1_000_000) too
FUTURE = NOW + 360_000  # more than MAX_FUTURE_MS (5 min) ahead of NOW


def _future_window_counts(with_victim: bool) -> dict:
    """The worker's steps on one partition, a crash and a restart (a rebalance does the
    same), with or without the victim's one record. The attacker's record ``u`` is
    stamped 6 min ahead: a future record when first read, left out."""
    (plan,) = build_aggregates(aggregates_config({**COUNT, "window": WINDOW, "output_topic": "a"}))
    view = _view()
    session = OpenWindows((plan,), view)
    log = [(995_000, "ios")]  # z: in window [990 s, 1000 s)
    if with_victim:
        log.append((NOW, "web"))  # the victim's record, in window [1000 s, 1010 s)
    log.append((FUTURE, "android"))  # u
    for offset, (stamp, os_name) in enumerate(log):
        session.add(0, offset, stamp, _record("x", os_name), NOW, misplaced=False)
    _commit(session, view, 0, 1_002_500)  # [990 s, 1000 s) closes; offsets committed
    committed = session.held(0, len(log))
    # crash; the restart (1 min later) reads the input again from the committed offset
    restarted = OpenWindows((plan,), view)
    later = NOW + 70_000
    for offset in range(committed, len(log)):
        stamp, os_name = log[offset]
        restarted.add(0, offset, stamp, _record("x", os_name), later, misplaced=False)
    _commit(restarted, view, 0, FUTURE + 20_000)  # every window closes
    return _counts(view, FUTURE - FUTURE % 10_000)


def test_whether_a_future_record_counts_does_not_depend_on_another_record() -> None:
    """Finding 3. Step 19: a record's treatment is a function of that record and of when
    it is read, never of another record. The committed offset is held at the oldest open
    window's first record, so the victim's record (window [1000 s, 1010 s), open at the
    commit) makes the restart read ``u`` again, when it is no longer future: ``u`` is
    counted in ITS window (which does not hold the victim's record) only if the victim's
    record exists. Removing the victim changes a window it is not in."""
    with_victim = _future_window_counts(with_victim=True)
    without = _future_window_counts(with_victim=False)
    assert with_victim == without, (
        f"the victim's record (not in the window) changed the window's exact counts: "
        f"{with_victim} with it, {without} without"
    )


def test_the_left_out_partials_logged_do_not_reveal_whether_a_partition_had_records() -> None:
    """Finding 4. Step 19: nothing unnoised about records leaves the worker. After a
    restart under another plan, ``Release.left_out`` (logged at WARNING by
    ``_Step._release``) counts the old plan's partial records of the window; an empty
    partial is no record, so it is exactly 1 if one record reached the window on the
    partition and 0 if none did (and grows with the number of cells, one per chunk)."""

    def left_out(records: int) -> list[str]:
        old, new = _plans(10), _plans(1)
        view = _view()
        windows = OpenWindows(old, view)
        for i in range(records):
            windows.add(0, i, 1_000, _record("u1"), 0, misplaced=False)
        _commit(windows, view, 0, 12_000)
        (done,) = releases(new, view, KeyedCells(bytes(32), "raw"), partitions=1)
        assert not hasattr(done, "left_out"), "a release carries a count of left-out partials"
        # what the worker logs (``_Step.restart``): the aggregates whose plan changed
        return OpenWindows(new, view).changed

    assert left_out(1) == left_out(0) == ["n"], (
        f"the logged plan change is {left_out(1)} with one record in the window and "
        f"{left_out(0)} without: a function of the data"
    )


def test_a_subject_whose_home_moved_when_the_input_grew_counts_once() -> None:
    """Finding 5. Step 20 after the input
    gains partitions: ``_Step`` fixes the partition count at the session's start, so two
    replicas (one started before, one after the topic grew from 2 to 4 partitions) apply
    ``misplaced`` with different counts; a subject whose home moved is counted on its old
    home by one and on its new home by the other, and ``releases`` merges both. The fix:
    the first transaction commits the count (``count_writes``), and a session that finds
    another is refused (``refuse_other_count``, at every restart: ``_Step.restart``), so the
    replica started after the growth counts nothing."""
    (plan,) = _plans()
    from privstream.aggregates.deployments import count_writes, refuse_other_count
    from privstream.errors import ChangelogError
    from privstream.worker.partitioner import partitions_of

    user = next(u for u in (f"u{i}" for i in range(100)) if len(set(_homes(partitions_of, u))) == 2)
    old_home, new_home = _homes(partitions_of, user)
    view = _view()
    for key, value in count_writes(view, 2):  # the first replica's first transaction
        view.apply(key, value)
    windows = OpenWindows((plan,), view)
    _feed_at(windows, old_home, user, partitions=2)  # a replica started before the growth
    refused = ""
    try:
        refuse_other_count(view, 4, "in-privstream-aggregates")  # one started after it
    except ChangelogError as exc:
        refused = str(exc)
    else:
        _feed_at(windows, new_home, user, partitions=4)
    for partition in range(4):
        _commit(windows, view, partition, 12_000)
    counted = sum(_counts(view, 0).values())
    assert counted <= 1, (
        f"subject {user!r} counted {counted} times (old home {old_home} under 2 partitions, "
        f"new home {new_home} under 4) against a bound of 1"
    )
    assert "over 2 input partitions" in refused and "has 4 now" in refused
    assert "docs/aggregates.md, Adding partitions" in refused


def _homes(partitions_of: Any, user: str) -> tuple[int, int]:
    key = [user.encode()]
    return int(partitions_of(key, 2)[0]), int(partitions_of(key, 4)[0])


def _feed_at(windows: OpenWindows, partition: int, user: str, partitions: int) -> None:
    batch = [_message(partition, 0, _record(user))]
    (wrong,) = misplaced_records(batch, partition, partitions, "user")
    windows.add(partition, 0, 1_000, batch[0].value, 0, misplaced=wrong)


def _renamed_plans(name: str) -> tuple:
    day = {**COUNT, "name": "day", "window": {"size_seconds": 86_400, "grace_seconds": 2}}
    short = {**COUNT, "name": name, "window": WINDOW}
    return build_aggregates(
        aggregates_config({**day, "output_topic": "a"}, {**short, "output_topic": "a"})
    )


def test_renaming_an_aggregate_does_not_release_its_released_windows_again() -> None:
    """Finding 6. Step 16: each window released at most once; step 11: the budget check
    charges each aggregate of the config once. The ``released`` marker is per aggregate
    name and a newly seen name starts at the epoch's window, while the committed input
    offset is held by the config's longest window (here a day): after a rename (``n`` to
    ``n2``, nothing else changed), the restart reads the day's records again and ``n2``
    releases every window ``n`` already released, over the same records, with
    independent noise (another release id): the same records released twice, beyond
    ``privacy.epsilon``, with no refusal."""
    view = _view()
    first = OpenWindows(_renamed_plans("n"), view)
    first.add(0, 0, 1_000, _record("u1"), 1_000, misplaced=False)
    _commit(first, view, 0, 12_000)  # n's [0, 10 s) closes; the day stays open
    released = releases(_renamed_plans("n"), view, KeyedCells(bytes(32), "raw"), 1)
    assert [r.label for r in released if r.plan.name == "n"] == ["1970-01-01T00:00:00.000Z/10s"]
    for done in released:
        for key, value in done.writes:
            view.apply(key, value)
    committed = first.held(0, 1)
    assert committed == 0  # the day's window holds the offset
    # the operator renames n to n2 and restarts: the input is read again from `committed`
    second = OpenWindows(_renamed_plans("n2"), view)
    second.add(0, 0, 1_000, _record("u1"), 13_000, misplaced=False)
    _commit(second, view, 0, 13_000)
    counts = dict(
        reduce(
            merge,
            [decode_partial("n2", "w", v) for _, v in view.inputs("n2", 0).values()],
            Partial("n2", "w"),
        ).counts
    )
    again = releases(_renamed_plans("n2"), view, KeyedCells(bytes(32), "raw"), 1)
    due = [r.label for r in again if r.plan.name == "n2"]
    assert counts == {} or "1970-01-01T00:00:00.000Z/10s" not in due, (
        f"window [0, 10 s), released under 'n', is released again under 'n2' over the same "
        f"record: {counts}, due {due}"
    )


def test_removing_a_subject_changes_the_window_by_at_most_its_bound() -> None:
    """Finding 1, the other way. Step 1: per-subject state, so removing a subject changes
    no other subject's admitted records. Two subjects beyond 64 bits (``10**30`` and
    ``10**30 + 1``: two subjects, two keys, to the ledger) parse (orjson) to one float and
    so share one identity and one bound: removing the first lets the second's record in,
    an L1 change of 2 against noise calibrated for 1."""
    big = 10**30

    def counts(users: list[tuple[int, str]]) -> dict:
        (plan,) = _plans()
        view = _view()
        windows = OpenWindows((plan,), view)
        values = [b'{"user":%d,"os":"%s"}' % (u, os.encode()) for u, os in users]
        _feed(windows, 0, values, 1)
        _commit(windows, view, 0, 12_000)
        return _counts(view, 0)

    both, without = counts([(big, "ios"), (big + 1, "web")]), counts([(big + 1, "web")])
    change = sum(abs(both.get(c, 0) - without.get(c, 0)) for c in set(both) | set(without))
    assert change <= 1, f"removing subject 10**30 changed the window by {change}: {both} {without}"


def test_an_open_windows_memory_per_subject_is_not_kilobytes() -> None:
    """Finding 7 (liveness). Memory grows with the distinct subjects of every open window
    (docs/aggregates.md names only the cells): each subject's identity key
    (``RecordReader.identity``, ``orjson.dumps``) keeps a ~4 KiB buffer for a ~20-byte
    value, so a producer sending a million distinct subject values in a window costs
    ~4.6 GB per aggregate; the worker dies, its restart replays the same window (the
    committed offset is held at its first record) and dies again: no window of any
    partition is released again. Deterministic (tracemalloc counts the allocations)."""
    import tracemalloc

    (plan,) = _plans()
    accumulator = plan.accumulator("w")
    records = [{"user": f"subject-{i:08d}", "os": "ios"} for i in range(20_000)]
    tracemalloc.start()
    try:
        for record in records:
            accumulator.add(record)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held / len(records) < 1024, (
        f"{held / len(records):.0f} bytes per distinct subject in one open window"
    )


# Finding 8 (framed input formats): `run` refuses them (``stream_problems``), asserted by
# tests/unit/aggregates/test_windows.py::test_run_refuses_aggregates_over_framed_input.

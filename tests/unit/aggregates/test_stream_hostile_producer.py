"""The aggregates' windows under a hostile producer's timestamps, partitions and values.

First written by red team 12b (findings 1 and 3 to 6 of issue 34, failing on the
first streaming merge); adapted to the fixed API with their assertions kept: one
record never closes a window nor changes the treatment of another, a partial of
any size can be committed, a partial of another plan is never merged, and a
subject on two partitions counts once against its bound.
"""

from __future__ import annotations

import json
from functools import reduce

import pytest
from aiokafka.structs import ConsumerRecord
from privstream.aggregates import KeyedCells, Partial, build_aggregates, merge
from privstream.aggregates.stream import OpenWindows
from privstream.aggregates.windows import (
    View,
    decode_partial,
    epoch_record,
    progress_record,
)
from privstream.errors import PrivstreamError
from privstream.worker.aggregate_input import misplaced_records
from privstream.worker.partitioner import partitions_of

from tests.support.aggregates import aggregates_config

WINDOW = {"size_seconds": 10, "grace_seconds": 2}
COUNT = {"name": "n", "query": "histogram", "field": "os", "epsilon": 1.0}
NOW = 1_000_000  # the wall clock, ms
HOUR = 3_600_000


def _windows() -> tuple[OpenWindows, View]:
    config = aggregates_config({**COUNT, "window": WINDOW, "output_topic": "agg"})
    view = View()
    view.apply(*epoch_record(0))
    return OpenWindows(build_aggregates(config), view), view


def _record(os_name: str) -> bytes:
    return json.dumps({"os": os_name}).encode()


def _commit(windows: OpenWindows, view: View, partition: int, now: int) -> None:
    for key, value in windows.close(partition, now):
        view.apply(key, value)


def _counts(view: View, start: int) -> dict:
    """A window's committed counts, merged over its partials' chunks and partitions."""
    parts = [decode_partial("n", "w", value) for _, value in view.inputs("n", start).values()]
    return dict(reduce(merge, parts, Partial("n", "w")).counts)


def test_one_record_stamped_hours_ahead_closes_nothing_and_makes_nothing_late() -> None:
    """docs/aggregates.md "Windows": a record past the wall clock by more than
    ``MAX_FUTURE_MS`` is a future record, left out; windows close by the wall clock,
    so one record 23 h ahead neither closes a partition's windows nor makes an honest
    record late (nor holds the committed offset for a day)."""
    windows, view = _windows()
    windows.add(0, 0, NOW, _record("ios"), NOW, misplaced=False)
    windows.add(0, 1, NOW + 23 * HOUR, _record("web"), NOW, misplaced=False)  # 23 h ahead
    _commit(windows, view, 0, NOW)
    windows.add(0, 2, NOW + 5_000, _record("android"), NOW + 5_000, misplaced=False)
    assert view.progress.get(("n", 0), 0) <= NOW + 10_000, (
        f"one record closed partition 0's windows up to {view.progress[('n', 0)]} ms "
        f"(the wall clock is {NOW} ms)"
    )
    _commit(windows, view, 0, NOW + 12_000)  # [NOW, NOW + 10 s) closes: its end + grace
    assert _counts(view, NOW) == {("ios",): 1, ("android",): 1}, "an honest record was late"
    assert windows.held(0, 3) == 3, "the future record holds the committed offset"


#: Kafka's default max.message.bytes (broker and topic), the limit docs/aggregates.md names
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588


def test_a_hostile_producer_cannot_make_a_partial_too_large_to_commit() -> None:
    """With ``select_groups`` every distinct value a producer sends is a cell: 60,000
    distinct values in one window make a ~2 MB partial. Its records must each fit
    Kafka's default ``max.message.bytes`` (else the close transaction is refused and
    retried forever), and together still hold every cell (chunks change no release)."""
    config = aggregates_config(
        {
            "name": "v",
            "query": "count",
            "group_by": [{"field": "version"}],
            "select_groups": True,
            "epsilon": 1.0,
            "delta": 1e-6,
            "window": WINDOW,
            "output_topic": "agg",
        }
    )
    view = View()
    view.apply(*epoch_record(0))
    windows = OpenWindows(build_aggregates(config), view)
    for i in range(60_000):
        value = json.dumps({"version": f"hostile-version-{i:08d}"}).encode()
        windows.add(0, i, 1_000, value, 0, misplaced=False)
    writes = windows.close(0, 12_000)
    sizes = {key.decode(): len(key) + len(value or b"") for key, value in writes}
    assert max(sizes.values()) <= KAFKA_DEFAULT_MAX_MESSAGE_BYTES, (
        f"an internal record of {max(sizes.values())} bytes (limit "
        f"{KAFKA_DEFAULT_MAX_MESSAGE_BYTES}): {sizes}"
    )
    for key, value in writes:
        view.apply(key, value)
    parts = [decode_partial("v", "w", value) for _, value in view.inputs("v", 0).values()]
    assert len(parts) >= 2  # chunked
    merged = reduce(merge, parts, Partial("v", "w"))
    assert len(merged.counts) == 60_000 and set(merged.counts.values()) == {1}


def test_a_group_key_longer_than_the_cap_is_no_key() -> None:
    """A cell stays a few kilobytes, so no chunk passes the limit with one huge key."""
    from privstream.aggregates.read import MAX_KEY_CHARS

    config = aggregates_config(
        {
            "name": "v",
            "query": "count",
            "group_by": [{"field": "version"}],
            "select_groups": True,
            "epsilon": 1.0,
            "delta": 1e-6,
        }
    )
    (plan,) = build_aggregates(config)
    acc = plan.accumulator("w")
    acc.add({"version": "x" * MAX_KEY_CHARS})
    acc.add({"version": "y" * (MAX_KEY_CHARS + 1)})
    assert acc.partial().counts == {("x" * MAX_KEY_CHARS,): 1}


def _window_counts(victim: bool, injected: int) -> dict:
    """Window [0, 10 s)'s committed counts, for a stream with or without the victim's one
    record (stamped in the NEXT window, [10 s, 20 s)), closing after every record."""
    windows, view = _windows()

    def step(offset: int, stamp: int, os_name: str, now: int) -> None:
        windows.add(0, offset, stamp, _record(os_name), now, misplaced=False)
        _commit(windows, view, 0, now)

    step(0, 1_000, "ios", 5_000)
    if victim:
        step(1, 12_500, "web", 5_000)  # the victim's record
    for i in range(injected):  # the attacker's records, stamped in [0, 10 s), after it
        step(2 + i, 9_000, "android", 5_000 + i)
    step(2 + injected, 30_000, "ios", 30_000)  # the wall clock closes [0, 10) and [10, 20)
    return _counts(view, 0)


def test_one_records_presence_changes_a_window_it_is_not_in_by_at_most_one() -> None:
    """The claim (docs/proofs/aggregates.md, step 19): each window's rows are DP for
    adding or removing one unit. An attacker sends k records stamped in an earlier window
    right after the victim's possible record: whether the victim's record is there must
    not change how the k are treated (here: all counted both ways), so removing the
    victim changes window [0, 10 s), which does not hold its record, by at most 1."""
    k = 10
    with_victim = _window_counts(victim=True, injected=k)
    without = _window_counts(victim=False, injected=k)
    cells = set(with_victim) | set(without)
    change = {c: abs(with_victim.get(c, 0) - without.get(c, 0)) for c in cells}
    assert max(change.values()) <= 1, (
        f"removing one record (not in the window) changed its exact counts by {change}: "
        f"{with_victim} with it, {without} without"
    )
    assert with_victim == {("ios",): 1, ("android",): k}


def test_no_exact_count_of_left_out_records_is_published() -> None:
    """An exact per-record counter (late records) changes by a unit's record count with
    no noise: the metrics hold none (docs/proofs/aggregates.md, step 19)."""
    from privstream.metrics import Metrics
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    Metrics(registry=registry)
    names = {family.name for family in registry.collect() if "aggregate" in family.name}
    # released values and the release schedule only (a function of the wall clock)
    assert names == {
        "privstream_aggregate_value",
        "privstream_aggregate_window_end_seconds",
        "privstream_aggregate_windows_released",
    }


def _bounded_plans(records_per_group: int) -> tuple:
    config = aggregates_config(
        {
            **COUNT,
            "window": WINDOW,
            "output_topic": "agg",
            "contribution": {"records_per_group": records_per_group, "groups_per_subject": 1},
        },
        subject="user",
    )
    return build_aggregates(config)


def test_a_partial_committed_under_other_bounds_is_not_released_under_new_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A window closed on partition 0 under ``records_per_group: 10`` (one subject's 10
    records kept) and released after a restart with ``records_per_group: 1`` must not
    merge that partial into a release calibrated for 1 record per subject (10 epsilon):
    a partial made under another plan (another release id) is left out, never merged."""
    import privstream.aggregates.stream as stream

    old = _bounded_plans(10)
    view = View()
    view.apply(*epoch_record(0))
    windows = OpenWindows(old, view)
    for i in range(10):  # one subject, ten records: all kept under the old bound
        value = json.dumps({"user": "u1", "os": "ios"}).encode()
        windows.add(0, i, 1_000, value, 0, misplaced=False)
    _commit(windows, view, 0, 12_000)
    view.apply(*progress_record("n", 1, 10_000))  # partition 1 closes [0, 10 s) later
    new = _bounded_plans(1)  # the operator tightened the bound and restarted
    assert new[0].query.totals[0].sensitivity.records == 1
    assert new[0].partial_id != old[0].partial_id
    merged_seen: list = []

    def capture(plan: object, merged: object, noise: object) -> list:
        merged_seen.append(merged)
        return []

    monkeypatch.setattr(stream, "release", capture)
    try:
        due = stream.releases(new, view, KeyedCells(bytes(32), "raw"), partitions=2)
    except PrivstreamError:
        return  # refused: also sound
    kept = [m.counts.get(("ios",), 0) for m in merged_seen]
    assert kept == [] or max(kept) <= 1, (
        f"one subject's {max(kept)} records released with noise calibrated for 1 per subject"
    )
    # left out, tombstoned, and named by the plan change alone (no count: red team 13a)
    assert sum(value is None for _, value in due[0].writes) == 1
    assert stream.OpenWindows(new, view).changed == ["n"]


def _message(partition: int, offset: int, key: bytes | None, value: bytes) -> ConsumerRecord:
    return ConsumerRecord("in", partition, offset, 0, 0, key, value, None, 0, len(value), ())


@pytest.mark.parametrize("key", [None, b"u1", b"someone-else"])
def test_a_subject_on_two_partitions_counts_at_most_its_bound(key: bytes | None) -> None:
    """Contribution bounds are per (window, partition) accumulator: a subject whose
    records reach both partitions (a null key sent round-robin, a key other than the
    subject, a producer choosing the partition) would count twice its bound against
    noise calibrated for one. The ledger's ``misplaced`` rule, applied to the subject,
    leaves out the records on a partition other than the subject's."""
    (plan,) = _bounded_plans(1)
    view = View()
    view.apply(*epoch_record(0))
    windows = OpenWindows((plan,), view)
    home = int(partitions_of([b"u1"], 2)[0])
    value = json.dumps({"user": "u1", "os": "ios"}).encode()
    for partition in (0, 1):
        (wrong,) = misplaced_records([_message(partition, 0, key, value)], partition, 2, "user")
        assert wrong == (partition != home)
        windows.add(partition, 0, 1_000, value, 0, misplaced=wrong)
        _commit(windows, view, partition, 12_000)
    assert _counts(view, 0) == {("ios",): 1}, "subject u1 counted twice against a bound of 1"


def test_without_a_subject_no_record_is_misplaced() -> None:
    value = json.dumps({"user": "u1", "os": "ios"}).encode()
    assert misplaced_records([_message(p, 0, None, value) for p in (0, 1)], 0, 2, None) == [
        False,
        False,
    ]


def test_the_latest_value_gauge_follows_each_aggregates_latest_window() -> None:
    """A group kept keeps its new value, a dropped one loses its sample, another aggregate's
    groups stay, and a window with no selected group leaves none (red team 14c, finding 4)."""
    from privstream.metrics import Metrics
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    metrics = Metrics(registry=registry)

    def value(aggregate: str, version: str) -> float | None:
        labels = {"aggregate": aggregate, "group": f'{{"version":"{version}"}}'}
        return registry.get_sample_value("privstream_aggregate_value", labels)

    rows = [{"group": {"version": v}, "value": n} for v, n in (("1", 5), ("2", 7))]
    metrics.observe_window("a", 10_000, rows)
    metrics.observe_window("b", 10_000, rows[1:])
    metrics.observe_window("a", 20_000, [{"group": {"version": "1"}, "value": 6}])
    assert (value("a", "1"), value("a", "2"), value("b", "2")) == (6.0, None, 7.0)
    metrics.observe_window("a", 30_000, [])
    assert (value("a", "1"), value("b", "2")) == (None, 7.0)

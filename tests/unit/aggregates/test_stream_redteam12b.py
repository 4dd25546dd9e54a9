"""Red team 12b: the aggregates' watermark under a hostile producer's timestamps.

Expected to FAIL on main at 7ff56f4 (findings, not fixes): each test states the
documented behaviour (docs/aggregates.md "Windows", docs/proofs/aggregates.md
step 19) and shows the code does otherwise.
"""

from __future__ import annotations

import json

import pytest
from privstream.aggregates import KeyedCells, build_aggregates
from privstream.aggregates.stream import OpenWindows
from privstream.aggregates.windows import (
    MAX_FUTURE_MS,
    View,
    decode_partial,
    epoch_record,
    progress_record,
)
from privstream.errors import PrivstreamError

from tests.support.aggregates import aggregates_config

WINDOW = {"size_seconds": 10, "grace_seconds": 2, "idle_seconds": 5}
COUNT = {"name": "n", "query": "histogram", "field": "os", "epsilon": 1.0}
NOW = 1_000_000  # the wall clock, ms


def _windows() -> tuple[OpenWindows, View]:
    config = aggregates_config({**COUNT, "window": WINDOW, "output_topic": "agg"})
    view = View()
    view.apply(*epoch_record(0))
    return OpenWindows(build_aggregates(config), view), view


def _record(os_name: str) -> bytes:
    return json.dumps({"os": os_name}).encode()


def test_one_record_stamped_hours_ahead_does_not_make_later_records_late() -> None:
    """docs/aggregates.md: a far-future record "moves no watermark (one record must not
    close a partition's windows, nor make its later records late)"; proof step 19: "one
    record cannot close a partition's windows ahead of time". The guard only refuses
    timestamps more than MAX_FUTURE_MS ahead: one record 23 h ahead closes every window of
    its partition for the next 23 h, and every honest record in that time is dropped as
    late. Removing that one record changes the counts of up to a day of other records
    (the sensitivity of steps 4-14 no longer bounds the release)."""
    windows, view = _windows()
    windows.add(0, 0, NOW, _record("ios"), NOW)
    windows.add(0, 1, NOW + MAX_FUTURE_MS - 3_600_000, _record("web"), NOW)  # 23 h ahead
    for key, value in windows.close(0, NOW, caught_up=False):
        view.apply(key, value)
    windows.add(0, 2, NOW + 5_000, _record("android"), NOW + 5_000)  # an honest record
    late = windows.take_late()
    assert late == {}, f"one record 23 h ahead made an honest record late: {dict(late)}"
    assert view.progress.get(("n", 0), 0) <= NOW + 10_000, (
        f"one record closed partition 0's windows up to {view.progress[('n', 0)]} ms "
        f"(the wall clock is {NOW} ms)"
    )


#: Kafka's default max.message.bytes (broker and topic), the limit docs/aggregates.md names
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588


def test_a_hostile_producer_cannot_make_a_partial_too_large_to_commit() -> None:
    """With ``select_groups`` a group-by field has no declared keys, so every distinct value
    a producer sends is a cell (``RecordReader.cell``: ``allowed is None``) of the window's
    partial, and the partial is ONE record of the internal topic written in the close
    transaction that carries every aggregate's progress and the input offsets. 60,000
    distinct values in one window make a ~2 MB partial: the producer refuses it
    (MessageSizeTooLargeError, a KafkaError: retried), the session restarts from the
    same committed offsets, reads the same records and fails again: no window of any
    aggregate is ever released again, and memory grows with the values. docs/aggregates.md
    "Limits" asks the operator to keep cells x bytes below max.message.bytes, which no
    operator can do when the cells come from the records."""
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
        windows.add(0, i, 1_000, value, 0)
    windows.add(0, 60_000, 20_000, json.dumps({"version": "1.0"}).encode(), 0)
    writes = windows.close(0, 0, caught_up=False)
    sizes = {key.decode(): len(value or b"") for key, value in writes}
    assert max(sizes.values()) <= KAFKA_DEFAULT_MAX_MESSAGE_BYTES, (
        f"an internal record of {max(sizes.values())} bytes (limit "
        f"{KAFKA_DEFAULT_MAX_MESSAGE_BYTES}): {sizes}"
    )


def _window_counts(victim: bool, injected: int) -> tuple[dict, int]:
    """Window [0, 10 s)'s exact committed counts and the late records, for a stream with
    or without the victim's one record (stamped in the NEXT window, [10 s, 20 s))."""
    windows, view = _windows()

    def step(offset: int, stamp: int, os_name: str) -> None:
        windows.add(0, offset, stamp, _record(os_name), 0)
        for key, value in windows.close(0, 0, caught_up=False):
            view.apply(key, value)

    step(0, 1_000, "ios")
    if victim:
        step(1, 12_500, "web")  # the victim's record: moves the watermark to 10.5 s
    for i in range(injected):  # the attacker's records, stamped in [0, 10 s), after it
        step(2 + i, 9_000, "android")
    step(2 + injected, 30_000, "ios")  # anyone's record: closes [0, 10) and [10, 20)
    counts = decode_partial("n", "w", view.partials["n", 0, 0]).counts
    return dict(counts), sum(windows.take_late().values())


def test_one_records_presence_changes_a_window_it_is_not_in_by_at_most_one() -> None:
    """The claim (docs/proofs/aggregates.md): each window's rows are DP for adding or
    removing ONE unit (here one record, sensitivity 1 per cell). Step 19 waves the
    watermark through by treating "the presence and order of records" as public, which
    is exactly what the counts' noise protects. An attacker who can produce to the
    partition (the neighbouring-stream adversary knows or writes every other record)
    sends k records stamped in an earlier window right after the victim's possible
    record: if the victim's record is there, its timestamp has closed that window and
    all k are late (dropped); if not, all k are counted. Removing the victim changes
    window [0, 10 s) -- which does not even hold the victim's record -- by k, so the
    noise of sensitivity 1 gives k * epsilon, and privstream_aggregate_late_records_total
    reports k or 0 exactly (no noise at all)."""
    k = 10
    with_victim, late_with = _window_counts(victim=True, injected=k)
    without, late_without = _window_counts(victim=False, injected=k)
    cells = set(with_victim) | set(without)
    change = {c: abs(with_victim.get(c, 0) - without.get(c, 0)) for c in cells}
    assert max(change.values()) <= 1, (
        f"removing one record (not in the window) changed its exact counts by {change}: "
        f"{with_victim} with it, {without} without"
    )
    assert late_with == late_without, f"the late counter says {late_with} against {late_without}"


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
    """Partials are keyed by aggregate NAME, window and partition only (``partial_key``),
    and ``releases`` decodes whatever the internal topic holds under the name. A window
    closed on partition 0 under ``records_per_group: 10`` (one subject's 10 records kept)
    and released after a restart with ``records_per_group: 1`` merges that partial into
    a release whose noise is calibrated for 1 record per subject (discrete Laplace t = 1
    instead of 10): the subject's presence is protected at 10 epsilon, not epsilon. The
    same holds for a sum's clamp bounds or grid. Expected: a partial made under another
    plan (another release id) is refused or left out, never merged."""
    import privstream.aggregates.stream as stream

    old = _bounded_plans(10)
    view = View()
    view.apply(*epoch_record(0))
    windows = OpenWindows(old, view)
    for i in range(10):  # one subject, ten records: all kept under the old bound
        windows.add(0, i, 1_000, json.dumps({"user": "u1", "os": "ios"}).encode(), 0)
    windows.add(0, 10, 20_000, json.dumps({"user": "u2", "os": "web"}).encode(), 0)
    for key, value in windows.close(0, 0, caught_up=False):
        view.apply(key, value)
    view.apply(*progress_record("n", 1, 10_000))  # partition 1 closes [0, 10 s) later
    new = _bounded_plans(1)  # the operator tightened the bound and restarted
    assert new[0].query.totals[0].sensitivity.records == 1
    merged_seen: list = []

    def capture(plan: object, merged: object, noise: object) -> list:
        merged_seen.append(merged)
        return []

    monkeypatch.setattr(stream, "release", capture)
    try:
        stream.releases(new, view, KeyedCells(bytes(32), "raw"), partitions=2)
    except PrivstreamError:
        return  # refused: the expected behaviour
    kept = [m.counts.get(("ios",), 0) for m in merged_seen]
    assert kept == [] or max(kept) <= 1, (
        f"one subject's {max(kept)} records released with noise calibrated for 1 per subject"
    )


def test_a_subject_on_two_partitions_counts_at_most_its_bound() -> None:
    """Contribution bounds are per (window, partition) accumulator; docs/aggregates.md
    "Limits" asks the operator to key the input by subject, but nothing checks it (the
    record path's ledger refuses ``misplaced`` records for the same reason). A subject
    whose records reach P partitions (a null key with a round-robin partitioner, a key
    other than the subject, a hostile producer choosing the partition) counts P times its
    bound in the merged window, against noise calibrated for one: P * epsilon. Expected:
    a record whose partition is not its subject's is left out (or the deployment
    refused), as the ledger does."""
    (plan,) = _bounded_plans(1)
    view = View()
    view.apply(*epoch_record(0))
    windows = OpenWindows((plan,), view)
    for partition in (0, 1):
        windows.add(partition, 0, 1_000, json.dumps({"user": "u1", "os": "ios"}).encode(), 0)
        windows.add(partition, 1, 20_000, json.dumps({"user": "u9", "os": "web"}).encode(), 0)
        for key, value in windows.close(partition, 0, caught_up=False):
            view.apply(key, value)
    merged = [
        decode_partial("n", "w", v).counts.get(("ios",), 0) for v in view.inputs("n", 0).values()
    ]
    assert sum(merged) <= 1, f"subject u1 counted {sum(merged)} times against a bound of 1"

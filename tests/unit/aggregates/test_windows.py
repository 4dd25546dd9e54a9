"""Windows over partitions: watermarks, lateness, the committed offsets, the internal
topic's state, and releases that are a function of the committed partials alone."""

from __future__ import annotations

import json

import pytest
from privstream.aggregates import KeyedCells
from privstream.aggregates.stream import OpenWindows, releases
from privstream.aggregates.windows import (
    MAX_DUE,
    MAX_FUTURE_MS,
    View,
    decode_partial,
    encode_partial,
    epoch_record,
    progress_record,
    released_record,
    watermark,
    window_label,
    window_start,
)
from privstream.config.aggregates import stream_problems

from tests.support.aggregates import aggregates_config

WINDOW = {"size_seconds": 10, "grace_seconds": 2, "idle_seconds": 5}
COUNT = {"name": "n", "query": "histogram", "field": "os", "epsilon": 1.0}
SECRET = bytes(range(32))
NOW = 0  # the wall clock the records are added at


def plans() -> tuple:
    from privstream.aggregates import build_aggregates

    config = aggregates_config({**COUNT, "window": WINDOW, "output_topic": "agg"})
    return build_aggregates(config)


def record(os_name: str) -> bytes:
    return json.dumps({"os": os_name}).encode()


def fresh_view(epoch_ms: int = 0) -> View:
    view = View()
    view.apply(*epoch_record(epoch_ms))
    return view


def test_windows_are_tumbling_and_labelled_by_utc_start_and_length() -> None:
    assert window_start(25_999, 10_000) == 20_000
    assert window_start(30_000, 10_000) == 30_000
    assert window_label(20_000, 10_000) == "1970-01-01T00:00:20.000Z/10s"


def test_watermark_falls_back_to_the_wall_clock_only_when_caught_up() -> None:
    assert watermark(50_000, 90_000, False, 2_000, 5_000) == 48_000
    assert watermark(50_000, 90_000, True, 2_000, 5_000) == 83_000
    assert watermark(None, 90_000, False, 2_000, 5_000) < 0  # nothing seen: nothing closes


def test_a_window_closes_at_its_watermark_and_later_records_of_it_are_late() -> None:
    view = fresh_view()
    windows = OpenWindows(plans(), view)
    windows.add(0, 0, 1_000, record("ios"), NOW)
    windows.add(0, 1, 11_000, record("web"), NOW)
    assert windows.close(0, 0, caught_up=False) == []  # watermark 9 s: window [0, 10) open
    windows.add(0, 2, 12_500, record("ios"), NOW)  # watermark 10.5 s: [0, 10) closes
    writes = windows.close(0, 0, caught_up=False)
    for key, value in writes:
        view.apply(key, value)
    assert view.progress == {("n", 0): 10_000}
    partial = decode_partial("n", "w", view.partials["n", 0, 0])
    assert partial.counts == {("ios",): 1}
    windows.add(0, 3, 9_999, record("android"), NOW)  # its window is closed: late
    assert windows.take_late() == {"n": 1}
    assert windows.take_late() == {}


def test_the_offset_committed_is_the_first_of_the_oldest_open_window() -> None:
    view = fresh_view()
    windows = OpenWindows(plans(), view)
    assert windows.held(0, 7) == 7  # nothing open: the position
    windows.add(0, 7, 1_000, record("ios"), NOW)
    windows.add(0, 8, 11_000, record("ios"), NOW)
    assert windows.held(0, 9) == 7
    for key, value in windows.close(0, 0, caught_up=True):  # wall clock 0: closes nothing
        view.apply(key, value)
    windows.add(0, 9, 12_500, record("ios"), NOW)
    for key, value in windows.close(0, 0, caught_up=False):
        view.apply(key, value)
    assert windows.held(0, 10) == 8  # [0, 10) closed: the first record of [10, 20)
    assert windows.held(1, 3) == 3  # other partitions: their own


def test_records_before_the_epochs_window_are_late() -> None:
    windows = OpenWindows(plans(), fresh_view(epoch_ms=25_000))
    windows.add(0, 0, 19_999, record("ios"), NOW)
    windows.add(0, 1, 20_000, record("ios"), NOW)
    assert windows.take_late() == {"n": 1}


def test_due_windows_are_every_window_all_partitions_closed_in_order() -> None:
    view = fresh_view(epoch_ms=5_000)
    view.apply(*progress_record("n", 0, 30_000))
    assert view.due("n", 10_000, 2) == []  # partition 1 has closed none
    view.apply(*progress_record("n", 1, 20_000))
    assert view.due("n", 10_000, 2) == [0, 10_000]  # empty windows too, from the epoch's
    view.apply(*released_record("n", 10_000))
    assert view.due("n", 10_000, 2) == [10_000]
    view.apply(*progress_record("n", 1, 10**9))
    view.apply(*progress_record("n", 0, 10**9))
    assert len(view.due("n", 10_000, 2)) == MAX_DUE


def test_partials_round_trip_and_tombstones_remove_them() -> None:
    view = fresh_view()
    windows = OpenWindows(plans(), view)
    windows.add(1, 0, 1_000, record("web"), NOW)
    windows.add(1, 1, 1_001, record("web"), NOW)
    writes = windows.close(1, 10**6, caught_up=True)
    key, value = writes[0]
    assert value is not None
    assert decode_partial("n", "w", value).counts == {("web",): 2}
    assert decode_partial("n", "w", encode_partial(decode_partial("n", "w", value))).counts == {
        ("web",): 2
    }
    view.apply(key, value)
    view.apply(key, None)
    assert view.partials == {}


def test_a_release_is_a_function_of_the_committed_partials_and_the_key() -> None:
    view = fresh_view()
    for partition, names in ((0, ["ios", "ios"]), (1, ["web"])):
        windows = OpenWindows(plans(), view)
        for offset, name in enumerate(names):
            windows.add(partition, offset, 1_000, record(name), NOW)
        for key, value in windows.close(partition, 10**6, caught_up=True):
            view.apply(key, value)
    noise = KeyedCells(SECRET, "raw")
    first = releases(plans(), view, noise, 2)
    again = releases(plans(), view, noise, 2)
    assert [r.rows for r in first] == [r.rows for r in again]  # a replay: the same bytes
    assert first[0].label == window_label(0, 10_000)
    assert len(first) == MAX_DUE  # the window of the records, then empty ones
    rows = {row["group"]["os"]: row for row in first[0].rows}
    assert set(rows) == {"ios", "android", "web"}
    # the release marker and the partials' tombstones go with the rows
    keys = [json.loads(key) for key, _ in first[0].writes]
    assert {"t": "released", "a": "n"} in keys
    assert sum(k["t"] == "partial" for k in keys) == 2
    other = releases(plans(), view, KeyedCells(SECRET, "other-topic"), 2)
    assert [r.rows for r in other] != [r.rows for r in first]


@pytest.mark.parametrize(
    ("extra", "transactions", "ledger", "found"),
    [
        ({"window": WINDOW, "output_topic": "agg"}, True, False, None),
        ({"output_topic": "agg"}, True, False, "window"),
        ({"window": WINDOW}, True, False, "output_topic"),
        ({"window": WINDOW, "output_topic": "agg"}, False, False, "kafka.transactions"),
        # the ledger does not charge aggregates yet: its caps would not hold for them
        ({"window": WINDOW, "output_topic": "agg"}, True, True, "privacy.ledger"),
    ],
)
def test_run_refuses_aggregates_it_cannot_release_once(
    extra: dict, transactions: bool, ledger: bool, found: str | None
) -> None:
    config = aggregates_config({**COUNT, **extra})
    problems = stream_problems(config.aggregates, transactions, ledger)
    if found is None:
        assert problems == []
    else:
        assert len(problems) == 1 and found in problems[0]


def test_the_window_is_part_of_the_release_id_only_when_set() -> None:
    from privstream.aggregates import build_aggregates

    (bare,) = build_aggregates(aggregates_config(COUNT))
    (windowed,) = build_aggregates(aggregates_config({**COUNT, "window": WINDOW}))
    longer = {**WINDOW, "grace_seconds": 3}
    (graced,) = build_aggregates(aggregates_config({**COUNT, "window": longer}))
    ids = {p.release_id("count") for p in (bare, windowed, graced)}
    assert len(ids) == 3


def test_a_timestamp_far_past_the_wall_clock_is_late_and_closes_nothing() -> None:
    view = fresh_view()
    windows = OpenWindows(plans(), view)
    windows.add(0, 0, 1_000, record("ios"), NOW)
    windows.add(0, 1, NOW + MAX_FUTURE_MS + 1, record("ios"), NOW)
    assert windows.take_late() == {"n": 1}
    assert windows.close(0, NOW, caught_up=False) == []  # [0, 10 s) still open
    windows.add(0, 2, NOW + MAX_FUTURE_MS, record("ios"), NOW)  # a day ahead: admitted
    assert windows.take_late() == {}

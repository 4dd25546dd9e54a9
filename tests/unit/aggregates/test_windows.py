"""Windows over partitions: watermarks, lateness, the committed offsets, the internal
topic's state, and releases that are a function of the committed partials alone."""

from __future__ import annotations

import json

import pytest
from privstream.aggregates import KeyedCells, Partial
from privstream.aggregates.stream import OpenWindows, releases
from privstream.aggregates.windows import (
    MAX_DUE,
    MAX_FUTURE_MS,
    Start,
    View,
    closed_until,
    decode_partial,
    encode_partial,
    epoch_record,
    progress_record,
    released_record,
    start_record,
    time_record,
    window_label,
    window_start,
)
from privstream.config.aggregates import stream_problems

from tests.support.aggregates import aggregates_config

WINDOW = {"size_seconds": 10, "grace_seconds": 2}
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
    """The topic after the deployment's first transaction: its epoch, ``n``'s start and
    time source."""
    view = View()
    view.apply(*epoch_record(epoch_ms))
    (plan,) = plans()
    view.apply(*start_record("n", Start(window_start(epoch_ms, 10_000), plan.partial_id)))
    view.apply(*time_record("n", plan.time_source))
    return view


def test_windows_are_tumbling_and_labelled_by_utc_start_and_length() -> None:
    assert window_start(25_999, 10_000) == 20_000
    assert window_start(30_000, 10_000) == 30_000
    assert window_label(20_000, 10_000) == "1970-01-01T00:00:20.000Z/10s"


def add(windows: OpenWindows, partition: int, offset: int, stamp: int, name: str) -> None:
    windows.add(partition, offset, stamp, record(name), NOW, misplaced=False)


def counts(view: View, start: int, partition: int = 0) -> dict:
    """The committed counts of a window's partial on a partition (all its chunks)."""
    found: dict = {}
    for at, value in view.inputs("n", start).values():
        if at.partition == partition:
            found.update(decode_partial("n", "w", value).counts)
    return found


def test_a_window_closes_at_its_end_plus_grace_by_the_wall_clock_alone() -> None:
    assert closed_until(12_000, 10_000, 2_000) == 10_000  # [0, 10 s) closes at 12 s
    assert closed_until(11_999, 10_000, 2_000) == 0
    view = fresh_view()
    windows = OpenWindows(plans(), view)
    add(windows, 0, 0, 1_000, "ios")
    add(windows, 0, 1, 250_000, "web")  # a later timestamp closes nothing
    assert windows.close(0, 11_999) == []
    for key, value in windows.close(0, 12_000):
        view.apply(key, value)
    assert view.progress == {("n", 0): 10_000}
    assert counts(view, 0) == {("ios",): 1}
    add(windows, 0, 2, 9_999, "android")  # its window is closed: late, left out
    add(windows, 0, 3, 10_000, "android")  # the next one is open
    assert windows.held(0, 4) == 1  # the oldest open window's first record


def test_the_offset_committed_is_the_first_of_the_oldest_open_window() -> None:
    view = fresh_view()
    windows = OpenWindows(plans(), view)
    assert windows.held(0, 7) == 7  # nothing open: the position
    add(windows, 0, 7, 1_000, "ios")
    add(windows, 0, 8, 11_000, "ios")
    assert windows.held(0, 9) == 7
    assert windows.close(0, 0) == []  # wall clock 0: closes nothing
    for key, value in windows.close(0, 12_000):
        view.apply(key, value)
    assert windows.held(0, 10) == 8  # [0, 10) closed: the first record of [10, 20)
    assert windows.held(1, 3) == 3  # other partitions: their own


def test_records_before_the_epochs_window_are_late() -> None:
    view = fresh_view(epoch_ms=25_000)
    windows = OpenWindows(plans(), view)
    add(windows, 0, 0, 19_999, "ios")
    add(windows, 0, 1, 20_000, "web")
    for key, value in windows.close(0, 10**6):
        view.apply(key, value)
    assert [at.start for at, _ in view.partials.values()] == [20_000]
    assert counts(view, 20_000) == {("web",): 1}


def test_due_windows_are_every_window_all_partitions_closed_in_order() -> None:
    view = fresh_view(epoch_ms=5_000)
    view.apply(*progress_record("n", 0, 30_000))
    assert view.due("n", 10_000, 2, {"n"}) == []  # partition 1 has closed none
    view.apply(*progress_record("n", 1, 20_000))
    assert view.due("n", 10_000, 2, {"n"}) == [0, 10_000]  # empty windows too, from the epoch's
    view.apply(*released_record("n", 10_000))
    assert view.due("n", 10_000, 2, {"n"}) == [10_000]
    view.apply(*progress_record("n", 1, 10**9))
    view.apply(*progress_record("n", 0, 10**9))
    assert len(view.due("n", 10_000, 2, {"n"})) == MAX_DUE


def test_partials_round_trip_and_tombstones_remove_them() -> None:
    view = fresh_view()
    windows = OpenWindows(plans(), view)
    add(windows, 1, 0, 1_000, "web")
    add(windows, 1, 1, 1_001, "web")
    writes = windows.close(1, 10**6)
    key, value = writes[0]
    assert value is not None
    at = {"t": "partial", "a": "n", "i": plans()[0].partial_id, "w": 0, "p": 1, "c": 0}
    assert json.loads(key) == at
    assert decode_partial("n", "w", value).counts == {("web",): 2}
    (again,) = encode_partial(decode_partial("n", "w", value))
    assert decode_partial("n", "w", again).counts == {("web",): 2}
    view.apply(key, value)
    view.apply(key, None)
    assert view.partials == {}
    assert encode_partial(Partial("n", "w")) == []  # no record in the window: no record


def test_a_release_is_a_function_of_the_committed_partials_and_the_key() -> None:
    view = fresh_view()
    for partition, names in ((0, ["ios", "ios"]), (1, ["web"])):
        windows = OpenWindows(plans(), view)
        for offset, name in enumerate(names):
            add(windows, partition, offset, 1_000, name)
        for key, value in windows.close(partition, 10**6):
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
        # the ledger charges contributions placed by Kafka timestamps (ledger-aggregates.md)
        ({"window": WINDOW, "output_topic": "agg"}, True, True, None),
    ],
)
def test_run_refuses_aggregates_it_cannot_release_once(
    extra: dict, transactions: bool, ledger: bool, found: str | None
) -> None:
    config = aggregates_config({**COUNT, **extra})
    problems = stream_problems(config.aggregates, transactions, ledger, "json")
    if found is None:
        assert problems == []
    else:
        assert len(problems) == 1 and found in problems[0]


@pytest.mark.parametrize("input_format", ["avro", "protobuf", "json_schema"])
def test_run_refuses_aggregates_over_framed_input(input_format: str) -> None:
    """The stream reads the aggregates' records as JSON: framed ones would all be left out."""
    config = aggregates_config({**COUNT, "window": WINDOW, "output_topic": "agg"})
    (problem,) = stream_problems(config.aggregates, True, False, input_format)
    assert f"kafka.format is {input_format}" in problem


def test_run_refuses_a_ledger_time_beside_aggregates() -> None:
    """The aggregate stream never sees the released time that would place a record in its
    ledger window: the contributions' decisions could not be found again."""
    config = aggregates_config({**COUNT, "window": WINDOW, "output_topic": "agg"})
    (problem,) = stream_problems(config.aggregates, True, True, "json", ledger_time="t")
    assert "privacy.ledger.time is 't'" in problem
    # nor an aggregate's window.time, which the record path's ledger does not read
    (spec,) = config.aggregates
    assert spec.window is not None
    timed = spec.model_copy(update={"window": spec.window.model_copy(update={"time": "t"})})
    (problem,) = stream_problems([timed], True, True, "json")
    assert "window.time is 't'" in problem
    assert stream_problems([timed], True, False, "json") == []


def test_the_window_is_part_of_the_release_id_only_when_set() -> None:
    from privstream.aggregates import build_aggregates

    (bare,) = build_aggregates(aggregates_config(COUNT))
    (windowed,) = build_aggregates(aggregates_config({**COUNT, "window": WINDOW}))
    longer = {**WINDOW, "grace_seconds": 3}
    (graced,) = build_aggregates(aggregates_config({**COUNT, "window": longer}))
    ids = {p.release_id("count") for p in (bare, windowed, graced)}
    assert len(ids) == 3


def test_a_timestamp_past_the_wall_clock_by_more_than_the_bound_is_left_out() -> None:
    view = fresh_view()
    windows = OpenWindows(plans(), view)
    add(windows, 0, 0, NOW + MAX_FUTURE_MS + 1, "ios")  # a future record: held nowhere
    assert windows.held(0, 1) == 0  # but not passed before its verdict's clock is written
    add(windows, 0, 1, NOW + MAX_FUTURE_MS, "web")  # at the bound: admitted
    assert windows.held(0, 2) == 0
    for key, value in windows.close(0, NOW + MAX_FUTURE_MS + 12_000):
        view.apply(key, value)
    assert counts(view, window_start(NOW + MAX_FUTURE_MS, 10_000)) == {("web",): 1}
    assert windows.held(0, 2) == 2  # the clock written with the partial: both passed

"""``window.time``: an aggregate's windows from a timestamp field of each record.

The field's raw time is parsed as the ``timestamp`` kind parses it (ISO 8601,
epoch seconds or milliseconds as its ``epoch_unit`` says), nested paths
included; a record whose time is missing, null or unparseable is left out
by itself; the future rule reads the field's time (docs/aggregates.md,
"Windows"; docs/proofs/aggregates.md, step 22).
"""

from __future__ import annotations

import json
from functools import reduce
from typing import Any

import pytest
from privstream.aggregates import Partial, build_aggregates, merge
from privstream.aggregates.clocks import TICK_MS
from privstream.aggregates.stream import OpenWindows
from privstream.aggregates.windows import View, decode_partial, epoch_record
from privstream.config import AppConfig, parse_config
from privstream.errors import ConfigError

NOW = 1_795_000_000_000  # the wall clock, ms: 2026-11-18T11:06:40Z
START = NOW - NOW % 10_000  # the 10 s window holding NOW
ISO_IN_WINDOW = "2026-11-18T11:06:43.500Z"  # START + 3.5 s
TIMES = [
    {"name": "at", "kind": "timestamp", "granularity": "1h"},
    {"name": "at_ms", "kind": "timestamp", "granularity": "1s", "epoch_unit": "ms"},
    {"name": "device.seen_at", "kind": "timestamp", "granularity": "1m"},
    {"name": "os", "kind": "public"},
]


def _config(time: str | None, fields: list[dict[str, Any]] = TIMES) -> AppConfig:
    window: dict[str, Any] = {"size_seconds": 10, "grace_seconds": 2}
    if time is not None:
        window["time"] = time
    count = {"name": "n", "query": "count", "epsilon": 1.0}
    return parse_config(
        {
            "kafka": {"input_topic": "raw", "output_topic": "out", "dead_letter_topic": "dlq"},
            "privacy": {"epsilon": 10.0, "delta": 1e-4},
            "fields": fields,
            "aggregates": [{**count, "window": window, "output_topic": "agg"}],
        }
    )


def _counted(time: str, records: list[dict[str, Any]], kafka_ms: int = 0) -> dict[int, int]:
    """Each window start's committed count once every window up to NOW + 10 s closed.

    Every record carries the Kafka timestamp ``kafka_ms`` (the epoch, by default:
    older than the first window), so a record counted is counted by its field alone.
    """
    view = View()
    view.apply(*epoch_record(NOW - 60_000))
    windows = OpenWindows(build_aggregates(_config(time)), view)
    for offset, record in enumerate(records):
        windows.add(0, offset, kafka_ms, json.dumps(record).encode(), NOW, misplaced=False)
    for key, value in windows.close(0, NOW + 22_000):
        view.apply(key, value)
    counts = {}
    for at, value in view.partials.values():
        part = reduce(merge, [decode_partial("n", "w", value)], Partial("n", "w"))
        counts[at.start] = sum(part.counts.values())
    return counts


@pytest.mark.parametrize(
    ("time", "value"),
    [
        ("at", ISO_IN_WINDOW),
        ("at", "2026-11-18T13:06:43.5+02:00"),  # another offset, the same instant
        ("at", (START + 3_500) / 1000),  # epoch seconds, a float
        ("at", (START + 3_000) // 1000),  # epoch seconds, an integer
        ("at_ms", START + 3_500),  # epoch milliseconds
    ],
)
def test_a_record_enters_the_window_of_its_fields_time(time: str, value: object) -> None:
    assert _counted(time, [{time: value}]) == {START: 1}


def test_a_nested_path_gives_the_window() -> None:
    records = [{"device": {"seen_at": ISO_IN_WINDOW}}, {"device": {"seen_at": "garbage"}}]
    assert _counted("device.seen_at", records) == {START: 1}


def test_the_time_is_the_instant_not_its_released_unit() -> None:
    """granularity 1h releases the hour; the window holds the instant (10 s windows)."""
    later = "2026-11-18T11:06:53Z"  # the next 10 s window, the same hour
    assert _counted("at", [{"at": ISO_IN_WINDOW}, {"at": later}]) == {START: 1, START + 10_000: 1}


@pytest.mark.parametrize(
    "record",
    [
        {},  # missing
        {"at": None},
        {"at": "not a time"},
        {"at": "2026-11-18T11:06:43"},  # no offset, and assume_utc is off
        {"at": "2026-02-30T00:00:00Z"},  # no such day
        {"at": True},  # a boolean is no epoch number
        {"at": [1]},
        {"at": {"seconds": 1}},
    ],
)
def test_a_record_without_a_readable_time_is_left_out_by_itself(record: dict[str, Any]) -> None:
    """The honest record beside it is counted in its window either way."""
    assert _counted("at", [record, {"at": ISO_IN_WINDOW}]) == {START: 1}


def test_the_kafka_timestamp_no_longer_decides_anything() -> None:
    """A record stamped (by Kafka) in the open window but timed long before the first
    window is late; one stamped days ahead but timed now is counted."""
    old = {"at": "2020-01-01T00:00:00Z"}
    assert _counted("at", [old], kafka_ms=START + 1_000) == {}
    assert _counted("at", [{"at": ISO_IN_WINDOW}], kafka_ms=NOW + 86_400_000) == {START: 1}


def test_a_record_timed_past_the_future_limit_is_dropped() -> None:
    """``MAX_FUTURE_MS`` (5 min) past the partition's read clock (here the tick of the first
    read's wall clock: no clock is committed yet), by the field's time: left out."""
    clock = NOW - NOW % TICK_MS
    future = clock + 300_001
    near = clock + 300_000  # at the limit: counted in its (still open) window
    view = View()
    view.apply(*epoch_record(NOW))
    windows = OpenWindows(build_aggregates(_config("at_ms")), view)
    for offset, at in enumerate([future, near, float("inf")]):
        value = json.dumps({"at_ms": at}).encode()  # inf: the stdlib writes Infinity
        windows.add(0, offset, NOW, value.replace(b"Infinity", b"1e999"), NOW, misplaced=False)
    writes = windows.close(0, near + 12_000)
    starts = {json.loads(key)["w"] for key, _ in writes if json.loads(key)["t"] == "partial"}
    assert starts == {near - near % 10_000}
    assert windows.held(0, 3) == 3, "a future record holds the committed offset"


def _replayed_future_counts(with_victim: bool) -> dict[int, int]:
    """One partition read at NOW + 0.5 s, a close at NOW + 12.5 s, a crash, and a restart
    70 s later that reads the input again from the committed offset. Every Kafka timestamp
    is the read time; ``u``'s field time is 6 min past it: a future record on its first
    read, and within 5 min of the restart's wall clock."""
    view = View()
    view.apply(*epoch_record(NOW))
    plans = build_aggregates(_config("at_ms"))
    first, restart = NOW + 500, NOW + 70_500
    times = [NOW + 1_000]  # z: window [NOW, NOW + 10 s), closed by the first close
    if with_victim:
        times.append(NOW + 12_000)  # the victim's: window [NOW + 10 s, NOW + 20 s), open
    times.append(NOW + 360_500)  # u
    values = [json.dumps({"at_ms": at}).encode() for at in times]
    session = OpenWindows(plans, view)
    for offset, value in enumerate(values):
        session.add(0, offset, first, value, first, misplaced=False)
    for key, value in session.close(0, NOW + 12_500):
        view.apply(key, value)
    committed = session.held(0, len(values))
    restarted = OpenWindows(plans, view)
    for offset in range(committed, len(values)):
        restarted.add(0, offset, restart, values[offset], restart, misplaced=False)
    for key, value in restarted.close(0, NOW + 400_000):
        view.apply(key, value)
    counts = {}
    for at, value in view.partials.values():
        counts[at.start] = sum(decode_partial("n", "w", value).counts.values())
    return counts


def test_a_field_time_future_record_is_judged_alike_on_a_replay() -> None:
    """Step 19 with step 22: ``u`` (field time 6 min ahead) is future on its first read. The
    victim's open window holds the committed offset before ``u``, so the restart reads
    ``u`` again; judged by the restart's wall clock it would now count, so whether it
    counts would hang on the victim's record. The field's time is compared with the
    partition's committed read clock, the Kafka-timestamp path's: left out both times."""
    u_window = NOW + 360_000
    with_victim = _replayed_future_counts(with_victim=True)
    without = _replayed_future_counts(with_victim=False)
    assert with_victim.get(u_window, 0) == 0, f"u counted on the replay: {with_victim}"
    assert without.get(u_window, 0) == 0, f"u counted without the replay: {without}"
    assert with_victim.get(NOW + 10_000) == 1  # the victim's record, counted once
    assert with_victim.get(NOW) == without.get(NOW) == 1  # z


def test_a_new_time_source_is_a_new_plan() -> None:
    """The time source is in the release id and the partial id: a partial committed under
    the Kafka timestamp is never merged into a release by a field's time, nor the noise
    reused; without ``time`` the ids are those of a config written before it existed."""
    (kafka,) = build_aggregates(_config(None))
    (field,) = build_aggregates(_config("at"))
    (other,) = build_aggregates(_config("at_ms"))
    assert len({kafka.partial_id, field.partial_id, other.partial_id}) == 3
    assert kafka.release_id("count") != field.release_id("count")
    # pinned when the declared keys joined the release id (red team 15a): a later change
    # that moves the ids of a config without ``time`` drops the open windows' partials
    assert kafka.partial_id == "e02026c81020b5970d06b11a06842ab5"


@pytest.mark.parametrize(
    ("time", "message"),
    [
        ("missing", "window.time 'missing' is not in fields; declare it there as kind: timestamp"),
        ("os", "window.time 'os' is of kind public: the window is read from a time"),
    ],
)
def test_config_load_refuses_a_time_that_is_no_timestamp_field(time: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _config(time)
    text = str(caught.value)
    assert f"aggregates[0] (n).window: {message}" in text
    assert "remove window.time" in text

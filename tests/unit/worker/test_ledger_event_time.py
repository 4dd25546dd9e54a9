"""``privacy.ledger.time``: ledger windows from a time inside the event (issue 32, item 3).

The event time is written by producers, who may be hostile: these tests
charge batches built by the real pipeline (``process_batch``) at a fixed
clock, 2026-06-01T10:30:00Z, and check that windows follow the released
time and never the Kafka timestamp (the records here are stamped with the
real, later, wall clock), that far-future and far-past times are suppressed
(``future_record``, ``late_record``), that spreading a subject's records
over many windows releases no more than the windows open at the clock
allow, and that a missing or unparsable time is dead-lettered by the
pipeline, naming the field, before anything is charged. Config load refuses
every time field the release decision could not read in the clear.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from privstream.cli.explain import explain
from privstream.config import config_sha256, parse_config
from privstream.config.runtime import Runtime
from privstream.errors import ConfigError, LedgerError
from privstream.kinds import build_plan
from privstream.metrics import Metrics
from privstream.pipeline import BatchResult, process_batch
from privstream.testing import SeededSource
from privstream.worker.clock import BrokerClock
from privstream.worker.ledger_columns import EventTime
from privstream.worker.ledger_store import LedgerStore, Verdict
from prometheus_client import CollectorRegistry

from tests.support.configs import config_dict, consumer_record

NOW = datetime(2026, 6, 1, 10, 30, tzinfo=UTC)
TIME: dict[str, Any] = {"name": "ts", "kind": "timestamp", "granularity": "1m"}
FIELDS: list[dict[str, Any]] = [
    {"name": "device_id", "kind": "drop"},
    TIME,
    {"name": "x", "kind": "real", "bounds": [0, 10], "epsilon": 1.0},
]
#: records cost epsilon 1: two per subject and hour
LEDGER = {"window": "1h", "epsilon": 2.0, "over_budget": "dead_letter", "time": "ts"}


def config(fields: list[dict[str, Any]] = FIELDS, **ledger: Any) -> Any:
    data = config_dict(fields, epsilon=1.0)
    data["privacy"].update({"subject": "device_id", "ledger": {**LEDGER, **ledger}})
    return parse_config(data)


@dataclass
class FixedClock(BrokerClock):
    """The clock charges are made at, fixed at ``NOW``."""

    def now_ms(self) -> int:
        return int(NOW.timestamp() * 1000)


def store() -> tuple[LedgerStore, Any]:
    cfg = config()
    plan = build_plan(cfg)
    made = LedgerStore.from_config(
        cfg, plan, Runtime(b"k" * 32, "r0", None), Metrics(CollectorRegistry())
    )
    assert made is not None and made.event_time is not None
    made.clock = FixedClock(bound_ms=made.policy.max_future_ms)
    made.ledger.restore(0, [])
    return made, plan


def at(minutes: float) -> str:
    """ISO text of ``NOW`` plus ``minutes``."""
    return (NOW + timedelta(minutes=minutes)).isoformat()


def charge(times: list[Any], subject: str = "a") -> tuple[Verdict, list[dict[str, Any]]]:
    """One batch of ``subject``'s records holding ``times`` (None: no ts), through the
    pipeline and the ledger: the verdict, and the released records decoded."""
    s, plan = store()
    values = [
        json.dumps({"device_id": subject, "x": 1.0, **({} if t is None else {"ts": t})}).encode()
        for t in times
    ]
    records = [consumer_record(i, v, subject.encode()) for i, v in enumerate(values)]
    result = process_batch(
        plan, values, SeededSource(1), [subject.encode()] * len(values), subject="device_id"
    )
    partitions = np.zeros(len(records), dtype=np.int64)
    verdict = s.charge(records, result, partitions)
    return verdict, [json.loads(out) for out in verdict.result.outputs]


def windows_written(verdict: Verdict) -> set[bytes]:
    """The window starts (8 bytes) whose spending the charge writes to the changelog
    (keys ``01 'W' start window subject``, ``privstream.ledger.codec``)."""
    return {key[2:10] for key, _ in verdict.updates[0] if key[:2] == b"\x01W"}


def reasons(verdict: Verdict) -> list[str]:
    return [d.reason for d in verdict.result.dead_letters]


def test_windows_follow_the_event_time_not_the_kafka_timestamp() -> None:
    """Two records in the hour before (open: grace 1h) and three in this hour: two of each
    hour are released, the third of this hour is over the cap. Under Kafka timestamps (the
    real clock, months after NOW) all five would be future records."""
    verdict, released = charge([at(-60), at(-45), at(-20), at(0), at(2)])
    assert reasons(verdict) == ["budget_exhausted"]
    assert verdict.result.output_index == [0, 1, 2, 3]
    hours = {int(datetime(2026, 6, 1, h, tzinfo=UTC).timestamp() * 1000) for h in (9, 10)}
    assert windows_written(verdict) == {h.to_bytes(8, "big") for h in hours}
    assert [r["ts"] for r in released] == [
        "2026-06-01T09:30:00Z", "2026-06-01T09:45:00Z", "2026-06-01T10:10:00Z",
        "2026-06-01T10:30:00Z",
    ]  # fmt: skip


def test_far_future_and_far_past_times_are_suppressed_never_charged() -> None:
    verdict, released = charge(
        ["9999-12-31T23:59:59Z", 10**30, at(6), "0001-01-01T00:00:00Z", -(10**30), 0, at(-121)]
    )
    assert released == []
    assert reasons(verdict) == ["future_record"] * 3 + ["late_record"] * 4
    details = {d.reason: d.detail for d in verdict.result.dead_letters}
    assert (
        "the record's time 'ts' is more than privacy.ledger.max_future" in details["future_record"]
    )
    assert "time 'ts' is older than its 1h window's end" in details["late_record"]
    # nothing released: no window spent (only the partition's clock and counts are written)
    assert windows_written(verdict) == set()


def test_spreading_records_over_many_windows_releases_no_more_than_the_open_windows_allow() -> None:
    """A hostile producer stamps 400 records of one subject a minute apart from 200 min
    before the clock to 200 min after it: only the windows open at the clock (the hour
    before, within grace, and this one; the next starts 30 min ahead, beyond max_future
    5m) are charged, two records each: 4 released, whatever the spread."""
    verdict, released = charge([at(m) for m in range(-200, 200)])
    hours = sorted({r["ts"][:13] for r in released})
    assert len(released) == 4 and hours == ["2026-06-01T09", "2026-06-01T10"]
    counted = {r: reasons(verdict).count(r) for r in set(reasons(verdict))}
    # before 09:00: 110 late; after 10:35: 194 future; 96 in the open hours, 92 over the cap
    assert counted == {"late_record": 110, "budget_exhausted": 92, "future_record": 194}


def test_the_window_is_a_function_of_the_released_time_only() -> None:
    """Times within one released minute give the same verdicts and outputs, however the
    seconds differ: the decision reads no more of the time than the output shows."""
    first, out_first = charge(["2026-06-01T10:20:00Z", "2026-06-01T09:59:00.000001Z"] * 2)
    second, out_second = charge(["2026-06-01T10:20:59.999Z", "2026-06-01T09:59:59Z"] * 2)
    assert reasons(first) == reasons(second) == []
    assert first.result.output_index == second.result.output_index == [0, 1, 2, 3]
    assert [r["ts"] for r in out_first] == [r["ts"] for r in out_second]


def test_a_missing_null_or_unparsable_time_is_dead_lettered_naming_the_field() -> None:
    verdict, released = charge([None, "not a time", at(0), True])
    assert len(released) == 1
    letters = {d.index: (d.reason, d.detail) for d in verdict.result.dead_letters}
    assert letters[0] == ("missing_field", "field 'ts': missing")
    assert letters[1][0] == "bad_timestamp" and "field 'ts'" in letters[1][1]
    assert letters[3][0] == "wrong_type" and "field 'ts'" in letters[3][1]
    assert "not a time" not in letters[1][1]  # names the field, never the value


def test_an_output_whose_time_cannot_be_read_back_is_refused_not_charged() -> None:
    s, plan = store()
    assert s.event_time is not None
    for outputs in ([b'{"x":1.0}'], [b'{"ts":"2026-06-01T10:30:30Z"}'], [b"not json"]):
        with pytest.raises(LedgerError, match=r"privacy\.ledger\.time"):
            s.event_time(outputs)
    result = BatchResult(outputs=[b'{"x":1.0}'], output_index=[0], subjects=[b"a"])
    record = consumer_record(0, b"{}", b"a")
    with pytest.raises(LedgerError, match="cannot be read back"):
        s.charge([record], result, np.zeros(1, dtype=np.int64))
    assert EventTime.of(plan, "ts").field == "ts"


@pytest.mark.parametrize(
    ("time_field", "options", "message"),
    [
        ("nope", {}, "no field named 'nope'"),
        ("seq", {}, "of kind public: the ledger reads a time in a declared format"),
        ("ts", {"epsilon": 0.5, "bounds": ["2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"]},
         "is noised"),
        ("ts", {"on_missing": "null", "presence_public": True}, "on_missing: dead_letter"),
        ("ts", {"granularity": "7m"}, "does not divide window 1h"),
        ("ts", {"granularity": "1d"}, "does not divide window 1h"),
    ],
)  # fmt: skip
def test_config_refuses_a_time_the_release_decision_could_not_read_in_the_clear(
    time_field: str, options: dict[str, Any], message: str
) -> None:
    fields = [*FIELDS[:1], {**TIME, **options}, FIELDS[2], {"name": "seq", "kind": "public"}]
    data = config_dict(fields, epsilon=2.0)
    data["privacy"].update({"subject": "device_id", "ledger": {**LEDGER, "time": time_field}})
    with pytest.raises(ConfigError, match=message) as caught:
        parse_config(data)
    assert "privacy.ledger.time" in str(caught.value)


def test_explain_says_where_the_windows_come_from() -> None:
    cfg = config()
    text = " ".join(explain(cfg, build_plan(cfg), "table").split())
    assert "ledger windows: from the released time of field 'ts'" in text
    assert "records whose time 'ts' is more than 5m ahead suppressed" in text


def test_a_ledger_without_time_keeps_its_config_hash() -> None:
    """Pinned from before ``privacy.ledger.time`` existed: an unset time is left out."""
    fields = [{"name": "d", "kind": "drop"}, {"name": "x", "kind": "real", "bounds": [0, 1],
              "epsilon": 1.0}]  # fmt: skip
    data = config_dict(fields, epsilon=1.0)
    data["kafka"] = {"input_topic": "a", "output_topic": "b", "dead_letter_topic": "c"}
    data["privacy"].update({"subject": "d", "ledger": {"window": "1h", "epsilon": 2.0}})
    del data["privacy"]["delta"]
    assert config_sha256(parse_config(data)) == (
        "91c1eaf21dffe02efd0cb6228ef7787604c7eabc446b0d853cc148018e37f825"
    )
    data["fields"].append(TIME)
    without = config_sha256(parse_config(data))
    data["privacy"]["ledger"]["time"] = "ts"
    assert config_sha256(parse_config(data)) != without  # set, it is part of the hash

"""``privacy.ledger.time`` on a real broker: windows from the event's own time (issue 32, item 3).

Every input is stamped by Kafka two days in the past (under Kafka
timestamps, with grace 1d, all would be ``late_record``); the event time
inside each record decides instead. A rollover subject spends two windows
by its event times; a hostile subject stamps 199 records an hour apart from
99 hours back to 100 hours ahead and gets no more than the lifetime cap;
far-future (year 9999) and far-past (1970) times are suppressed; a record
without a time, or with one that does not parse, is dead-lettered by the
pipeline naming the field. The expected verdicts come from the
record-at-a-time model of ``tests/support/ledger.py`` run on the event
times (truncated to the field's minute), and every input must be released
or dead-lettered exactly as it says.
"""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime
from pathlib import Path

from aiokafka import ConsumerRecord

from tests.support.faults import Tail, fault_topics, free_port
from tests.support.ledger import (
    DAY_MS,
    FIELDS,
    HOUR_MS,
    LIFETIME,
    Timed,
    accounted_for,
    assert_ledger_obeyed,
    body,
    expected_reasons,
    header,
    outcome,
    produce_timed,
    running,
    seq,
    source,
)
from tests.support.worker_proc import WorkerProcess, write_config

TIME_FIELD = {"name": "ts", "kind": "timestamp", "granularity": "1m"}
MINUTE_MS = 60_000


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def event_ms(value: object) -> int | None:
    """The released minute of a time, in epoch ms, as the field truncates it (None: no
    time the field reads)."""
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    ms = int(at.timestamp() * 1000)
    return ms - ms % MINUTE_MS


def expected(raw: list[ConsumerRecord], clock_ms: int) -> list[str | None]:
    """The pipeline's verdict on the time, then the ledger model on the event times."""
    times = [json.loads(r.value).get("ts", "absent") for r in raw]
    readable = [i for i, t in enumerate(times) if event_ms(t) is not None]
    stamped = [dataclasses.replace(raw[i], timestamp=event_ms(times[i])) for i in readable]
    model = dict(zip(readable, expected_reasons(stamped, clock_ms=clock_ms), strict=True))
    reasons: list[str | None] = []
    for i, t in enumerate(times):
        if i in model:
            reasons.append(model[i])
        else:
            reasons.append("missing_field" if t == "absent" else "bad_timestamp")
    return reasons


async def test_the_ledger_charges_windows_by_event_time(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka = await fault_topics(kafka_bootstrap, "ledger-time")
    now = int(time.time() * 1000)
    hour = now - now % HOUR_MS
    kafka_stamp = now - 2 * DAY_MS  # late under Kafka timestamps (grace 1d)
    messages: list[Timed] = []

    def add(subject: str, ts: object) -> None:
        value = {"device_id": subject, "seq": len(messages), "salary": 5, "state": "TX"}
        if ts is not None:
            value["ts"] = ts
        messages.append((subject.encode(), json.dumps(value).encode(), kafka_stamp))

    for h in (3, 2):  # rollover by event time: 5 in each of two windows, 3 released in each
        for i in range(5):
            add("roll", iso(hour - h * HOUR_MS + i * MINUTE_MS))
    # spreading: one record an hour from 99 h back to 100 h ahead (24 h back, whose window
    # closes with the next hour, is left out so the clock's passing an hour changes nothing)
    for k in range(99, -101, -1):
        if k != 24:
            add("spread", iso(now - k * HOUR_MS))
    add("future", "9999-12-31T23:59:59Z")
    add("past", "1970-01-01T00:00:00Z")
    add("no-time", None)
    add("bad-time", "yesterday")
    for s in range(100):  # ordinary subjects, within their caps
        add(f"quiet-{s}", iso(now - 10 * MINUTE_MS))
    await produce_timed(kafka_bootstrap, kafka["input_topic"], messages)

    fields = [*FIELDS, TIME_FIELD]
    config_body = {**body(time="ts"), "fields": fields}
    overrides = {**kafka, "transactions": True}
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, overrides, config_body)
    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with (
        Tail(kafka_bootstrap, kafka["output_topic"], identity=seq) as out_tail,
        Tail(kafka_bootstrap, kafka["dead_letter_topic"], identity=source) as dead_tail,
        running(worker, free_port()),
    ):
        await accounted_for(out_tail, dead_tail, len(messages), worker, within_s=120)
        assert await worker.terminate() == 0, worker.log_text()[-3000:]
    raw, out, dead = await outcome(kafka_bootstrap, kafka)
    want = expected(raw, clock_ms=now)
    summary = f"{len(raw)} inputs, {len(out)} outputs, {len(dead)} dead letters"
    reasons = assert_ledger_obeyed(raw, out, dead, want, summary)
    released = [json.loads(r.value) for r in out]
    by_subject = {s: sum(1 for r in raw if r.key == s.encode()) for s in ("roll", "spread")}
    assert by_subject == {"roll": 10, "spread": 199}
    spread_out = [r for r, why in zip(raw, want, strict=True) if r.key == b"spread" and not why]
    assert len(spread_out) == LIFETIME, summary  # 24 open windows, the lifetime cap holds
    assert reasons == {
        "budget_exhausted": 2 + 2,
        "late_record": 75 + 1,  # 99..25 h back, and 1970
        "future_record": 100 + 1,  # 1..100 h ahead, and year 9999
        "lifetime_exhausted": 24 - LIFETIME,  # spread: 23..0 h back
        "missing_field": 1,
        "bad_timestamp": 1,
    }, summary
    assert len(released) == 6 + LIFETIME + 100, summary
    assert all(r["ts"].endswith(":00Z") for r in released)  # the released minute
    details = {header(r, "privstream-reason").decode(): r for r in dead}
    assert b"'ts'" in header(details["future_record"], "privstream-detail")
    assert b"field 'ts': missing" in header(details["missing_field"], "privstream-detail")

"""10,000 raw records through `privstream run` on a real broker.

The worker is stopped with SIGTERM mid-stream and a second one takes over:
SIGTERM must exit 0, and the graceful hand-over must neither lose nor
duplicate a record (the in-flight batch is produced and committed first).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

from tests.support.broker import create_topics
from tests.support.worker_proc import (
    PRIVACY,
    Collector,
    WorkerProcess,
    decode,
    produce,
    read_all,
    unique_topics,
    write_config,
)

GOOD = 10_000
DEVICE_CANARY = "CANARY-DEVICE-7f3a"
HEADER_CANARY = b"CANARY-HEADER-91c2"
KEY_CANARY = "CANARY-KEY-"


def good_record(seq: int) -> dict[str, object]:
    return {
        "device_id": f"{DEVICE_CANARY}-{seq}",
        "seq": seq,
        "salary": 1504 + (seq % 2996) + 0.123456,  # canary fraction: raw salaries are recognisable
        "state": ["TX", "CA", "NY"][seq % 3],
        "opted_in": seq % 2 == 0,
        "internal_note": "not in the config",
    }


BAD: list[tuple[bytes, str]] = [
    (b"{not json", "invalid_json"),
    (b'{"seq": -1, "salary": 2000, "state": "TX"}', "missing_field"),
    (b'{"seq": -1, "salary": "high", "state": "TX", "opted_in": true}', "wrong_type"),
    (b'{"seq": -1, "salary": 2000, "state": "WA", "opted_in": true}', "unknown_category"),
]


def messages() -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]:
    out: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]] = []
    for seq in range(GOOD):
        key = f"{KEY_CANARY}{seq}".encode()
        out.append((key, json.dumps(good_record(seq)).encode(), [("trace", HEADER_CANARY)]))
        if seq % 200 == 0:  # 50 rounds of the 4 bad kinds
            out.extend((None, bad, []) for bad, _ in BAD)
    return out


async def test_ten_thousand_records_sigterm_handover(kafka_bootstrap: str, tmp_path: Path) -> None:
    kafka = unique_topics("e2e")
    await create_topics(kafka_bootstrap, [kafka["input_topic"]], partitions=4)
    await create_topics(kafka_bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 2)
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, PRIVACY)
    bad_expected = Counter({reason: GOOD // 200 for _, reason in BAD})

    # the second half is produced only after the first worker stopped, so the second worker
    # has records to take over (a fast first worker could otherwise drain everything and
    # the second would be stopped while it still starts up)
    every = messages()
    half = len(every) // 2
    await produce(kafka_bootstrap, kafka["input_topic"], every[:half])
    async with Collector(kafka_bootstrap, kafka["output_topic"]) as seen:
        first = WorkerProcess(config, tmp_path / "worker1.log")
        await first.start()
        await seen.wait_for(2_000, within_s=120)
        assert await first.terminate() == 0, first.log_text()
        await produce(kafka_bootstrap, kafka["input_topic"], every[half:])
        second = WorkerProcess(config, tmp_path / "worker2.log")
        await second.start()
        await seen.wait_for(GOOD, within_s=180)
        assert await second.terminate() == 0, second.log_text()

    sanitized = await read_all(kafka_bootstrap, kafka["output_topic"], partitions=2)
    dead = await read_all(kafka_bootstrap, kafka["dead_letter_topic"], partitions=2)

    # exactly once through a graceful hand-over: every seq once, nothing more
    seqs = [rec["seq"] for rec in decode(sanitized)]
    assert len(seqs) == GOOD
    assert sorted(seqs) == list(range(GOOD))
    assert Counter(h_value(r, "privstream-reason") for r in dead) == bad_expected

    # fail-closed output: allow-list only, no raw key, no raw header, no raw value
    raw_salaries = {good_record(s)["salary"] for s in range(GOOD)}
    for record, body in zip(sanitized, decode(sanitized), strict=True):
        assert set(body) == {"seq", "salary", "state", "opted_in"}
        assert record.key is None
        assert DEVICE_CANARY.encode() not in record.value
        assert KEY_CANARY.encode() not in record.value
        assert {k for k, _ in record.headers} == {
            "privstream-config-sha256",
            "privstream-release-sha256",
            "privstream-field-releases",
            "privstream-epsilon",
            "privstream-delta",
        }
        assert math.isfinite(body["salary"]) and body["salary"] not in raw_salaries
        assert body["state"] in ("TX", "CA", "NY")
        assert isinstance(body["opted_in"], bool)
    assert float(h_value(sanitized[0], "privstream-epsilon")) == 2.0
    assert float(h_value(sanitized[0], "privstream-delta")) == 1.0e-6

    # the dead-letter topic keeps the raw message and says why
    assert {r.value for r in dead} == {bad for bad, _ in BAD}


def h_value(record: object, name: str) -> str:
    headers = dict(record.headers)  # type: ignore[attr-defined]
    return headers[name].decode()

"""The worker releases ISO timestamps truncated, and noised ones as unit starts (issue 32, item 3).

2,000 app events with ISO 8601 times in four offsets, with and without
milliseconds, and a client clock in epoch milliseconds go through a real
worker on a real broker: every event is released (nothing dead-lettered),
the event time exactly at the start of its UTC hour, the client day with
noise as a whole day in epoch milliseconds.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from tests.support.broker import create_topics
from tests.support.worker_proc import (
    Collector,
    WorkerProcess,
    decode,
    produce,
    read_all,
    unique_topics,
    write_config,
)

N = 2_000
START = datetime(2026, 11, 1, tzinfo=UTC)
ZONES = [timedelta(0), timedelta(hours=2), timedelta(hours=-5), timedelta(hours=5, minutes=30)]
PRIVACY = {
    "privacy": {"epsilon": 2.0},
    "fields": [
        {"name": "seq", "kind": "public"},
        {"name": "user_id", "kind": "drop"},
        {"name": "ts", "kind": "timestamp", "granularity": "1h"},
        {"name": "client_ms", "kind": "timestamp", "epoch_unit": "ms", "granularity": "1d",
         "output": "epoch_ms", "epsilon": 2.0,
         "bounds": ["2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"]},
    ],
}  # fmt: skip


def event(seq: int) -> tuple[dict[str, object], datetime]:
    at = START + timedelta(seconds=seq * 1_237 % (29 * 86_400), milliseconds=seq % 1000)
    local = at.astimezone(timezone(ZONES[seq % len(ZONES)]))
    text = local.isoformat(timespec="milliseconds" if seq % 2 else "seconds")
    client_ms = int(at.timestamp() * 1000)
    record = {"seq": seq, "user_id": f"u{seq % 31}", "ts": text, "client_ms": client_ms}
    return record, at


async def test_the_worker_releases_every_event_truncated(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka = unique_topics("timestamps")
    await create_topics(kafka_bootstrap, [kafka["input_topic"]], partitions=2)
    await create_topics(kafka_bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 2)
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, PRIVACY)
    events = [event(seq) for seq in range(N)]
    messages = [(None, json.dumps(record).encode(), []) for record, _ in events]
    await produce(kafka_bootstrap, kafka["input_topic"], messages)
    async with Collector(kafka_bootstrap, kafka["output_topic"]) as seen:
        worker = WorkerProcess(config, tmp_path / "worker.log")
        await worker.start()
        outputs = decode(await seen.wait_for(N, within_s=120))
        assert await worker.terminate() == 0, worker.log_text()
    assert await read_all(kafka_bootstrap, kafka["dead_letter_topic"], 2) == []
    assert sorted(o["seq"] for o in outputs) == list(range(N))
    for released in outputs:
        at = events[released["seq"]][1]
        assert list(released) == ["seq", "ts", "client_ms"]
        assert released["ts"] == at.strftime("%Y-%m-%dT%H:00:00Z")
        assert type(released["client_ms"]) is int and released["client_ms"] % 86_400_000 == 0

"""5,000 app events with null and absent values through `privstream run` on a real broker.

Latency is noised with ``on_missing: impute`` and a presence bit, country
with ``on_missing: null`` (issue 32, item 2). Every record is released (no
dead letter), each with the same keys; the country is null exactly where
the raw one was absent or null; the headers carry the record's epsilon with
the presence bit's share.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

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

N = 5_000
BODY: dict[str, Any] = {
    "privacy": {"epsilon": 3.0},
    "fields": [
        {"name": "seq", "kind": "public"},
        {
            "name": "latency",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": [0, 500],
            "epsilon": 1.0,
            "on_missing": "impute",
            "impute": 0,
            "presence_epsilon": 1.0,
        },
        {
            "name": "country",
            "kind": "categorical",
            "domain": ["US", "DE", "FR"],
            "epsilon": 1.0,
            "on_missing": "null",
        },
    ],
}


def events() -> list[dict[str, Any]]:
    """Latency and country each null in 3% of the records and absent in 2%."""
    rng = np.random.default_rng(5)
    records = []
    for seq in range(N):
        record: dict[str, Any] = {
            "seq": seq,
            "latency": float(rng.gamma(4.0, 40.0)),
            "country": str(rng.choice(["US", "DE", "FR"])),
        }
        for name in ("latency", "country"):
            gap = rng.random()
            if gap < 0.03:
                record[name] = None
            elif gap < 0.05:
                del record[name]
        records.append(record)
    return records


async def test_null_and_absent_values_are_released(kafka_bootstrap: str, tmp_path: Path) -> None:
    kafka = unique_topics("missing")
    await create_topics(kafka_bootstrap, [kafka["input_topic"]], partitions=2)
    await create_topics(kafka_bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 2)
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, BODY)
    raw = events()
    await produce(
        kafka_bootstrap, kafka["input_topic"], [(None, json.dumps(r).encode(), []) for r in raw]
    )
    async with Collector(kafka_bootstrap, kafka["output_topic"]) as seen:
        worker = WorkerProcess(config, tmp_path / "worker.log")
        await worker.start()
        await seen.wait_for(N, within_s=180)
        assert await worker.terminate() == 0, worker.log_text()

    sanitized = await read_all(kafka_bootstrap, kafka["output_topic"], partitions=2)
    dead = await read_all(kafka_bootstrap, kafka["dead_letter_topic"], partitions=2)
    assert dead == []
    bodies = {body["seq"]: body for body in decode(sanitized)}
    assert sorted(bodies) == list(range(N))
    for record in raw:
        body = bodies[record["seq"]]
        assert set(body) == {"seq", "latency", "latency_present", "country"}
        assert isinstance(body["latency"], float) and isinstance(body["latency_present"], bool)
        assert (body["country"] is None) == (record.get("country") is None)
    headers = dict(sanitized[0].headers)
    assert float(headers["privstream-epsilon"].decode()) == 3.0

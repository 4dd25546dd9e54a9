"""5,000 nested app events with gaps through `privstream run` on a real broker (issue 32).

``device.os`` is noised with ``on_missing: impute`` and a presence bit,
``net.latency`` with ``on_missing: null``, ``device.app_version`` is public.
The whole ``net`` object is absent or null in some records, the OS null in
others: every such record is released, nested, with only the named keys.
Ten records hold an array where the ``device`` object should be: they alone
are dead-lettered, in the same transactions, with a reason naming the path.
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
BROKEN = set(range(7, N, 500))  # 10 records with an array for the device object
BODY: dict[str, Any] = {
    "privacy": {"epsilon": 3.0},
    "fields": [
        {"name": "seq", "kind": "public"},
        {
            "name": "device.os",
            "kind": "categorical",
            "domain": ["ios", "android", "web"],
            "epsilon": 1.0,
            "on_missing": "impute",
            "impute": "web",
            "presence_epsilon": 1.0,
        },
        {"name": "device.app_version", "kind": "public"},
        {
            "path": ["net", "latency"],
            "kind": "real",
            "mechanism": "laplace",
            "bounds": [0, 500],
            "epsilon": 1.0,
            "on_missing": "null",
        },
    ],
}


def events() -> list[dict[str, Any]]:
    """``net`` absent in 2% of the records and null in 2%, its latency null in 3% more, the
    OS null in 4%; every device carries a key no field names."""
    rng = np.random.default_rng(6)
    records = []
    for seq in range(N):
        record: dict[str, Any] = {
            "seq": seq,
            "device": {
                "os": str(rng.choice(["ios", "android", "web"])),
                "app_version": f"2.{seq % 3}",
                "imei": f"35-{seq}",
            },
            "net": {"latency": float(rng.gamma(4.0, 40.0)), "carrier": "x"},
        }
        gap = rng.random()
        if gap < 0.02:
            del record["net"]
        elif gap < 0.04:
            record["net"] = None
        elif gap < 0.07:
            record["net"]["latency"] = None
        if rng.random() < 0.04:
            record["device"]["os"] = None
        if seq in BROKEN:
            record["device"] = [record["device"]]
        records.append(record)
    return records


def latency(record: dict[str, Any]) -> Any:
    net = record.get("net")
    return None if net is None else net["latency"]


async def test_nested_values_are_released_and_broken_ones_dead_lettered(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka = unique_topics("nested")
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
        await seen.wait_for(N - len(BROKEN), within_s=180)
        assert await worker.terminate() == 0, worker.log_text()

    sanitized = await read_all(kafka_bootstrap, kafka["output_topic"], partitions=2)
    dead = await read_all(kafka_bootstrap, kafka["dead_letter_topic"], partitions=2)
    assert sorted(json.loads(message.value)["seq"] for message in dead) == sorted(BROKEN)
    for message in dead:
        headers = dict(message.headers)
        assert headers["privstream-reason"] == b"wrong_type"
        assert headers["privstream-detail"] == (
            b"field 'device.os': expected an object at 'device', got array"
        )
    bodies = {body["seq"]: body for body in decode(sanitized)}
    assert sorted(bodies) == sorted(set(range(N)) - BROKEN)
    for record in raw:
        if record["seq"] in BROKEN:
            continue
        body = bodies[record["seq"]]
        assert list(body) == ["seq", "device", "net"]
        assert list(body["device"]) == ["os", "os_present", "app_version"]
        assert body["device"]["os"] in ("ios", "android", "web")
        assert body["device"]["app_version"] == record["device"]["app_version"]
        assert list(body["net"]) == ["latency"]
        assert (body["net"]["latency"] is None) == (latency(record) is None)
    assert float(dict(sanitized[0].headers)["privstream-epsilon"].decode()) == 3.0

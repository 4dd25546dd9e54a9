"""The worker's /metrics, /healthz and /readyz, scraped over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path

from privstream.mechanisms import LaplaceMechanism, RandomizedResponse

from tests.support.broker import create_topics
from tests.support.faults import free_port, scrape_until
from tests.support.http_get import http_get
from tests.support.worker_proc import (
    Collector,
    WorkerProcess,
    produce,
    unique_topics,
    write_config,
)

BODY = {
    "privacy": {"epsilon": 1.5},
    "fields": [
        {"name": "seq", "kind": "public"},
        {
            "name": "amount",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": [0, 100],
            "epsilon": 1.0,
        },
        {"name": "tier", "kind": "categorical", "domain": ["a", "b", "c"], "epsilon": 0.5},
    ],
    "metrics": {"dead_letter_reasons": True},  # off by default (README "Metrics")
}
GOOD, BAD = (
    500,
    [b"[]", b"{oops", b'{"seq": 1, "amount": 5}', b'{"seq": 1, "amount": 5, "tier": "z"}'],
)


IN_TOTAL = ("privstream_records_in_total", ())


async def test_metrics_health_and_readiness(kafka_bootstrap: str, tmp_path: Path) -> None:
    kafka = unique_topics("http")
    await create_topics(kafka_bootstrap, list(kafka.values())[:3], partitions=1)
    port = free_port()
    body = {**BODY, "http": {"host": "127.0.0.1", "port": port}}
    config = write_config(tmp_path / "c.yaml", kafka_bootstrap, kafka, body)
    good = [
        (None, json.dumps({"seq": i, "amount": i % 100, "tier": "b"}).encode(), [])
        for i in range(GOOD)
    ]
    await produce(kafka_bootstrap, kafka["input_topic"], good + [(None, b, []) for b in BAD])

    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with (
        Collector(kafka_bootstrap, kafka["output_topic"]) as out,
        Collector(kafka_bootstrap, kafka["dead_letter_topic"]) as dead,
    ):
        await worker.start()
        await out.wait_for(GOOD, within_s=120)
        await dead.wait_for(len(BAD), within_s=60)
        # records flowed, so the worker is consuming: it must say it is ready
        assert await http_get(port, "/readyz") == (200, "ready\n")
        assert await http_get(port, "/healthz") == (200, "ok\n")
        assert (await http_get(port, "/nope"))[0] == 404
        # counters move after the batch is committed, a moment after its output is visible
        got = await scrape_until(port, lambda m: m.get(IN_TOTAL) == GOOD + len(BAD))
    assert await worker.terminate() == 0, worker.log_text()

    assert got[("privstream_records_in_total", ())] == GOOD + len(BAD)
    assert got[("privstream_records_out_total", ())] == GOOD
    for reason in ("not_object", "invalid_json", "missing_field", "unknown_category"):
        assert got[("privstream_records_dead_lettered_total", (("reason", reason),))] == 1
    assert got[("privstream_batch_duration_seconds_count", ())] >= 1
    assert got[("privstream_broker_connected", ())] == 1
    laplace = LaplaceMechanism(bounds=(0, 100), epsilon=1.0)
    rr = RandomizedResponse(domain=["a", "b", "c"], epsilon=0.5)
    for name, mech in (("amount", laplace), ("tier", rr)):
        labels = (("field", name), ("mechanism", mech.name))
        assert got[("privstream_field_epsilon", labels)] == mech.epsilon
        assert got[("privstream_field_expected_error", labels)] == mech.expected_error
        assert got[("privstream_field_gamma_lower_bound", labels)] == mech.gamma_lower_bound

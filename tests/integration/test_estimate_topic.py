"""`privstream estimate --topic` reads what a real worker committed, and only that.

A worker sanitizes 6,000 records; then a transactional producer writes 500
more sanitized-looking records to the output topic and aborts. `estimate`
(a real subprocess) must read exactly the 6,000 committed ones with
read_committed, up to the end offsets at start, and its intervals must
cover the truth. kcat (librdkafka) configured as the README tells readers
to be (isolation.level=read_committed) also sees the 6,000 only. Intervals
are at confidence 0.9999: with 4 intervals
checked, a correct estimator fails this test with probability < 4e-4.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

from aiokafka import AIOKafkaProducer

from tests.support.broker import create_topics
from tests.support.faults import read_to_end
from tests.support.worker_proc import (
    ROOT,
    Collector,
    WorkerProcess,
    produce,
    unique_topics,
    write_config,
)

N = 6_000
STATES = ("TX", "CA", "NY")
PRIVACY = {
    "privacy": {"epsilon": 3.0},
    "fields": [
        {"name": "seq", "kind": "public"},
        {"name": "temp", "kind": "real", "mechanism": "laplace", "bounds": [0, 40], "epsilon": 1.0},
        {"name": "state", "kind": "categorical", "domain": list(STATES), "epsilon": 1.0},
    ],
}


def record(seq: int) -> dict[str, object]:
    # a skewed truth: TX 1/2, CA 1/3, NY 1/6
    return {"seq": seq, "temp": 10.0 + seq % 21, "state": STATES[(seq % 6 > 2) + (seq % 6 > 4)]}


async def aborted_garbage(bootstrap: str, topic: str, headers: list[tuple[str, bytes]]) -> None:
    """500 records in an aborted transaction: read_committed must never see them."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}.aborter")
    await producer.start()
    try:
        await producer.begin_transaction()
        body = json.dumps({"seq": -1, "temp": 1000.0, "state": "NY"}).encode()
        for _ in range(500):
            await producer.send(topic, body, headers=headers)
        await producer.abort_transaction()
    finally:
        await producer.stop()


async def kcat_count(bootstrap: str, topic: str, isolation: str) -> int:
    """Messages kcat (librdkafka, Debian's package) reads to the end of ``topic``."""
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat missing: `make system-deps` installs it"
    proc = await asyncio.create_subprocess_exec(
        kcat,
        *("-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q"),
        *("-X", f"isolation.level={isolation}", "-f", "%o\n"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return len(out.splitlines())


async def run_estimate(config: Path) -> tuple[int | None, str, str]:
    """``privstream estimate --topic`` as a subprocess: exit code, stdout, stderr."""
    estimate = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "privstream.cli.main", "estimate", "--config", str(config), "--topic"),
        *("--confidence", "0.9999", "--format", "json"),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(estimate.communicate(), 120)
    return estimate.returncode, out.decode(), err.decode()


async def test_estimate_reads_the_committed_topic_and_covers_the_truth(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka = unique_topics("estimate")
    await create_topics(kafka_bootstrap, [kafka["input_topic"]], partitions=2)
    await create_topics(kafka_bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 2)
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, PRIVACY)
    truth = [record(s) for s in range(N)]
    await produce(
        kafka_bootstrap, kafka["input_topic"], [(None, json.dumps(r).encode(), []) for r in truth]
    )
    async with Collector(kafka_bootstrap, kafka["output_topic"]) as seen:
        worker = WorkerProcess(config, tmp_path / "worker.log")
        await worker.start()
        outputs = await seen.wait_for(N, within_s=120)
        assert await worker.terminate() == 0, worker.log_text()
    await aborted_garbage(kafka_bootstrap, kafka["output_topic"], list(outputs[0].headers))
    everything = await read_to_end(
        kafka_bootstrap, kafka["output_topic"], 2, isolation_level="read_uncommitted"
    )
    assert len(everything) == N + 500  # the aborted records are there for a careless reader
    # a third-party reader configured as the README says sees the committed ones only
    assert await kcat_count(kafka_bootstrap, kafka["output_topic"], "read_committed") == N
    assert await kcat_count(kafka_bootstrap, kafka["output_topic"], "read_uncommitted") == N + 500

    code, out, err = await run_estimate(config)
    assert code == 0, err
    report = json.loads(out)

    assert report["records_read"] == N  # committed only; the aborted 500 are invisible
    assert report["records_skipped"] == {}
    fields = {f["name"]: f for f in report["fields"]}
    report_temp = fields["temp"]["mean"]
    low, high = fields["temp"]["mean"]["ci"]
    true_mean = sum(float(r["temp"]) for r in truth) / N  # type: ignore[arg-type]
    assert low <= true_mean <= high
    for entry in fields["state"]["frequencies"]:
        share = sum(r["state"] == entry["value"] for r in truth) / N
        assert entry["ci"][0] <= share <= entry["ci"][1], entry

    # a later config, its fields reordered and state's epsilon changed: the worker's
    # privstream-field-releases header keeps temp usable and refuses state, by name
    seq, temp, state = PRIVACY["fields"]  # type: ignore[misc]
    later = {**PRIVACY, "fields": [{**state, "epsilon": 0.5}, temp, seq]}
    code, out, err = await run_estimate(write_config(tmp_path / "later.yaml", kafka_bootstrap,
                                                     kafka, later))  # fmt: skip
    assert code == 0, err
    assert f"field state refused in {N:,} records: released under another release id" in err
    fields = {f["name"]: f for f in json.loads(out)["fields"]}
    assert fields["temp"]["records"] == N and fields["temp"]["mean"] == report_temp
    assert fields["state"]["records"] == 0 and fields["state"]["skipped"] == {"other_release": N}

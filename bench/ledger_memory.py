"""A ledger's steady memory against its restore's peak, each in a process of its own.

``bench/ledger.py`` runs this module twice against one broker and a changelog
topic of 4 partitions:

* ``steady``: charges ``--subjects`` new subjects (10,000 a batch, the
  partitions in turn, one 1d window) and writes each charge's changelog
  records with ``LedgerStore.send_updates``, as a worker does; then the RSS
  it holds (psutil, after a collection) is the steady memory.
* ``restore``: a fresh process restores those partitions with
  ``LedgerStore`` (``assigned``, then ``ready``), as a restarted worker does;
  its RSS high-water mark (``ru_maxrss``, which counts the C allocations,
  numpy's and the hash tables', as well as Python's) is the restore's peak.

Both first tune malloc as ``privstream run`` does (``cli.allocator``) and
import the same modules, so their baselines match. Each prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from aiokafka import AIOKafkaProducer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from privstream.cli.allocator import tune_allocator
from privstream.config import KafkaConfig, parse_config
from privstream.config.runtime import Runtime
from privstream.kinds import build_plan
from privstream.ledger import LedgerPolicy, SubjectLedger
from privstream.metrics import Metrics
from privstream.pipeline import BatchResult
from privstream.worker.clients import producer_options
from privstream.worker.ledger_store import LedgerStore, Verdict
from prometheus_client import CollectorRegistry

from bench.reference import config_dict

LEDGER: dict[str, Any] = {"window": "1d", "epsilon": 60.0, "over_budget": "drop"}
CHARGE_BATCH = 10_000
PARTITIONS = 4
RUNTIME = Runtime(b"k" * 32, "bench-ledger-memory", None)


def policy() -> LedgerPolicy:
    """The benchmark's ledger: the reference record, ``LEDGER`` on ``device_id``."""
    data = config_dict()
    data["privacy"].update({"subject": "device_id", "ledger": LEDGER})
    config = parse_config(data)
    return LedgerPolicy.from_config(config, build_plan(config))


def kafka_config(bootstrap: str, topic: str) -> KafkaConfig:
    """Names around the changelog ``topic`` (only the changelog is used)."""
    return KafkaConfig(
        bootstrap_servers=bootstrap,
        input_topic=f"{topic}-in",
        output_topic=f"{topic}-out",
        dead_letter_topic=f"{topic}-dl",
        transactions=False,
    )


def store(bootstrap: str, topic: str) -> LedgerStore:
    return LedgerStore(
        ledger=SubjectLedger(policy=policy(), deployment="bench"),
        topic=topic,
        kafka=kafka_config(bootstrap, topic),
        runtime=RUNTIME,
        metrics=Metrics(CollectorRegistry()),
        subject_field="device_id",
    )


async def steady(bootstrap: str, topic: str, subjects: int) -> dict[str, float]:
    """Charge ``subjects`` new subjects, writing the changelog; the RSS then held."""
    ledger_store = store(bootstrap, topic)
    producer = AIOKafkaProducer(**producer_options(kafka_config(bootstrap, topic), RUNTIME))
    await producer.start()
    now = int(time.time() * 1000)
    try:
        for start in range(0, subjects, CHARGE_BATCH):
            names = [b"dev-%09d" % i for i in range(start, min(start + CHARGE_BATCH, subjects))]
            partition = start // CHARGE_BATCH % PARTITIONS
            stamps = np.full(len(names), now, dtype=np.int64)
            charge = ledger_store.ledger.charge(
                partition, subjects=names, keys=names, timestamps_ms=stamps, now_ms=now
            )
            verdict = Verdict(result=BatchResult(), updates={partition: charge.updates})
            await ledger_store.send_updates(producer, verdict)
    finally:
        await producer.stop()
    return _measured(ledger_store)


async def restore(bootstrap: str, topic: str, subjects: int) -> dict[str, float]:
    """Restore every partition from the changelog; the peak RSS it took."""
    ledger_store = store(bootstrap, topic)
    began = time.perf_counter()
    ledger_store.assigned(TopicPartition(f"{topic}-in", p) for p in range(PARTITIONS))
    await ledger_store.ready(range(PARTITIONS))
    seconds = time.perf_counter() - began
    try:
        return {**_measured(ledger_store), "seconds": seconds}
    finally:
        await ledger_store.close()


def _measured(ledger_store: LedgerStore) -> dict[str, float]:
    gc.collect()
    return {
        "rss_mib": psutil.Process().memory_info().rss / 2**20,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10,  # KiB on Linux
        "subjects": ledger_store.ledger.active_subject_windows(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("steady", "restore"))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--subjects", type=int, required=True)
    args = parser.parse_args()
    tune_allocator()
    run = steady if args.mode == "steady" else restore
    print(json.dumps(asyncio.run(run(args.bootstrap, args.topic, args.subjects))))


if __name__ == "__main__":
    main()

"""Client settings by measurement: `privstream run` drains one topic under each setting.

A 4-partition topic is pre-loaded with the reference record (300,000;
``--quick``: 100,000). Each setting then drains all of it as a fresh group with
one worker (``bench/tuned_worker.py``: the real worker, aiokafka options
overridden), and reports the records/s the group committed (first commit to
last), the worker's CPU seconds per 100,000 records, and the bytes the
sanitized topic holds on the broker's disk (what compression saves). Settings
run in turn, round after round, the order rotated each round; each keeps its
best drain. The worker writes the sanitized topic's record batches itself
(``worker/output_batch.py``), uncompressed and up to its own bound, so the
producer's ``max_batch_size`` and ``compression_type`` no longer reach them:
the settings that changed those (batch 64 and 256 KiB, lz4, zstd) were
removed; their results in docs/benchmarks.md predate it.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kafka import Worker, broker, drain_rate, new_topics, preload, write_config
from bench.reference import print_environment

KIB = 1024
SETTINGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "per-message send": {"per_message": True},
    "linger_ms 0": {"producer": {"linger_ms": 0}},
    "linger_ms 50": {"producer": {"linger_ms": 50}},
    "fetch 256 KiB/partition": {"consumer": {"max_partition_fetch_bytes": 256 * KIB}},
    "fetch 4 MiB/partition": {"consumer": {"max_partition_fetch_bytes": 4 * KIB * KIB}},
}


def topic_bytes(topic: str) -> int:
    """Bytes of ``topic``'s log segments on the local broker's disk."""
    pattern = os.path.join(tempfile.gettempdir(), "privstream-kafka-*", "**", f"{topic}-*", "*.log")
    return sum(os.path.getsize(path) for path in glob.glob(pattern, recursive=True))


async def drain(
    bootstrap: str, raw: str, total: int, workdir: Path, name: str, settings: dict[str, Any]
) -> tuple[float, float, int]:
    """Records/s, worker CPU seconds per 100,000 records, bytes of the sanitized topic."""
    topics = await new_topics(bootstrap, "tune")
    topics.raw = raw
    config = write_config(
        workdir / f"{topics.group}.yaml",
        bootstrap,
        topics,
        max_batch_records=10_000,
        poll_timeout_ms=100,
    )
    env = {"PRIVSTREAM_BENCH_CLIENTS": json.dumps(settings)}
    worker = Worker(
        config, workdir, topics.group, passthrough=False, script="tuned_worker.py", env=env
    )
    try:
        rate = await drain_rate(bootstrap, topics.group, total, [worker], within_s=1800)
        times = psutil.Process(worker.proc.pid).cpu_times()
        cpu = times.user + times.system
    finally:
        worker.stop()
    return rate, cpu / total * 100_000, topic_bytes(topics.out)


async def run(args: argparse.Namespace) -> None:
    total = 100_000 if args.quick else args.records
    names = args.only or list(SETTINGS)
    best: dict[str, tuple[float, float, int]] = {}
    with broker() as bootstrap, tempfile.TemporaryDirectory(prefix="privstream-tune-") as tmp:
        topics = await new_topics(bootstrap, "tune")
        print(
            f"pre-loaded {total:,} records ({await preload(bootstrap, topics.raw, total):,.0f}/s)"
        )
        await drain(bootstrap, topics.raw, total, Path(tmp), "warm-up", {})  # the JVM warms up
        for round_ in range(args.rounds):
            shift = round_ % len(names)  # each setting runs early in one round, late in another
            for name in names[shift:] + names[:shift]:
                rate, cpu, size = await drain(
                    bootstrap, topics.raw, total, Path(tmp), name, SETTINGS[name]
                )
                mib = size / 2**20
                print(f"  {name:24} {rate:10,.0f}/s  {cpu:5.2f} CPU s/100k  {mib:6.1f} MiB")
                if name not in best or rate > best[name][0]:
                    best[name] = (rate, cpu, size)
    base = best.get("defaults", next(iter(best.values())))[0]
    print("\nbest of each (records/s, / defaults, worker CPU s per 100k records, sanitized MiB):")
    for name, (rate, cpu, size) in best.items():
        print(f"{name:24} {rate:10,.0f} {rate / base:5.2f}x {cpu:5.2f} {size / 2**20:7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 records")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", nargs="*", choices=list(SETTINGS), help="these settings only")
    args = parser.parse_args()
    print_environment("aiokafka", "cramjam")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()

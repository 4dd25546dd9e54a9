"""Latency at a steady 10,000 records/s, and what the transaction batch size trades.

For each ``max_batch_records`` (the most records one poll, hence one
transaction, holds): start `privstream run` on fresh topics, produce the
reference record at a steady 10,000 records/s for 30 s (``--quick``: one batch
size, 5 s) with the produce time in its public ``ts`` field (microseconds), and
read the sanitized topic with ``isolation_level=read_committed``. Latency is
read time minus ``ts``: produce -> broker -> worker -> transaction commit ->
readable. Then a burst of 100,000 records (``--quick``: 20,000) measures the
drain rate the same batch size allows.

No target is enforced (the issue asks for the numbers); exit 1 only if the
worker cannot keep up with the offered rate (fewer than 95% of the records
read back).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from aiokafka import AIOKafkaConsumer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kafka import (
    Topics,
    Worker,
    broker,
    drain_rate,
    new_topics,
    preload,
    producer,
    write_config,
)
from bench.reference import print_environment, record

RATE = 10_000
TICK_S = 0.01


async def steady_load(bootstrap: str, topic: str, seconds: float) -> int:
    """Produce RATE records/s in ticks of TICK_S; returns how many were sent."""
    client = producer(bootstrap, linger_ms=1, acks="all")
    await client.start()
    rng = random.Random(1)
    sent = 0
    try:
        start = time.perf_counter()
        pending = []
        while (elapsed := time.perf_counter() - start) < seconds:
            due = int(elapsed * RATE) - sent
            for _ in range(due):
                value = record(rng, sent)
                value["ts"] = time.time_ns() // 1000
                pending.append(await client.send(topic, json.dumps(value).encode()))
                sent += 1
            await asyncio.sleep(TICK_S)
        await asyncio.gather(*pending)
    finally:
        await client.stop()
    return sent


async def read_latencies(
    bootstrap: str, topic: str, stop: asyncio.Event, since_us: int
) -> list[float]:
    """Seconds from produce to readable (read_committed) of the records produced since then."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    latencies: list[float] = []
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=50)
            now = time.time_ns() // 1000
            for messages in batches.values():
                stamps = [json.loads(m.value)["ts"] for m in messages]
                latencies.extend((now - ts) / 1e6 for ts in stamps if ts >= since_us)
    finally:
        await consumer.stop()
    return latencies


async def one_size(bootstrap: str, workdir: Path, size: int, seconds: float, burst: int) -> bool:
    topics = await new_topics(bootstrap, f"latency{size}")
    config = write_config(
        workdir / f"latency{size}.yaml",
        bootstrap,
        topics,
        max_batch_records=size,
        poll_timeout_ms=50,
    )
    worker = Worker(config, workdir, f"latency-{size}", passthrough=False)
    try:
        # warm up: the group join and the first transactions are not steady state
        await preload(bootstrap, topics.raw, 1_000)
        await drain_rate(bootstrap, topics.group, 1_000, [worker], within_s=120)
        stop = asyncio.Event()
        since_us = time.time_ns() // 1000  # the warm-up records carry older stamps
        reader = asyncio.create_task(read_latencies(bootstrap, topics.out, stop, since_us))
        await asyncio.sleep(1.0)
        sent = await steady_load(bootstrap, topics.raw, seconds)
        await asyncio.sleep(3.0)
        stop.set()
        latencies = np.array(await reader)
        burst_rate = await burst_drain(bootstrap, topics, 1_000 + sent, burst, worker)
    finally:
        worker.stop()
    p50, p99 = np.percentile(latencies, [50, 99]) * 1e3 if len(latencies) else (np.nan, np.nan)
    print(
        f"{size:>17,} {len(latencies):>9,}/{sent:<9,} {p50:9.1f} {p99:9.1f} {burst_rate:14,.0f}",
        flush=True,
    )
    return len(latencies) >= 0.95 * sent


async def burst_drain(
    bootstrap: str, topics: Topics, before: int, burst: int, worker: Worker
) -> float:
    await preload(bootstrap, topics.raw, burst)
    return await drain_rate(bootstrap, topics.group, before + burst, [worker], within_s=600)


async def run(args: argparse.Namespace) -> int:
    sizes = args.sizes or ([2_000] if args.quick else [200, 2_000, 10_000])
    seconds = 5.0 if args.quick else args.seconds
    burst = 20_000 if args.quick else 100_000
    ok = True
    with broker() as bootstrap, tempfile.TemporaryDirectory(prefix="privstream-bench-") as tmp:
        print(f"steady {RATE:,} records/s for {seconds:g} s, then a burst of {burst:,}")
        header = f"{'max_batch_records':>17} {'read/sent':>19} {'p50 ms':>9} {'p99 ms':>9}"
        print(f"{header} {'burst rec/s':>14}")
        for size in sizes:
            ok &= await one_size(bootstrap, Path(tmp), size, seconds, burst)
    if not ok:
        print("the worker did not keep up with the offered rate")
    return 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one batch size, 5 s: a smoke run")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--sizes", type=int, nargs="*", help="max_batch_records values to run")
    args = parser.parse_args()
    print_environment("aiokafka")
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()

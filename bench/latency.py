"""Latency at a steady 10,000 records/s, and what the transaction batch size trades.

For each ``max_batch_records`` (the most records one poll, hence one
transaction, holds): start `privstream run` on fresh topics, produce the
reference record at a steady 10,000 records/s for 30 s (``--quick``: one batch
size, 5 s) with the produce time in its public ``ts`` field (microseconds), and
read the sanitized topic with ``isolation_level=read_committed``. Latency is
read time minus ``ts``: produce -> broker -> worker -> transaction commit ->
readable. It is split at the sanitized message's own timestamp (the worker
stamps it when it builds the record batch, after sanitizing): "to worker" is
the load generator's send, the broker and the worker's fetch and sanitize;
"commit + read" is the transaction and the reader's fetch. The worker runs at
the default settings but for ``max_batch_records``. Then a burst of 100,000
records (``--quick``: 20,000), written while no worker runs, measures the drain
rate the same batch size allows.

No target is enforced (the issue asks for the numbers); exit 1 only if the
worker cannot keep up with the offered rate (fewer than 95% of the records
read back).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kafka import (
    PARTITIONS,
    Topics,
    Worker,
    broker,
    drain,
    drain_rate,
    new_topics,
    preload,
    write_config,
)
from bench.reference import print_environment, record

RATE = 10_000
TICK_S = 0.01


def steady_load(bootstrap: str, topic: str, seconds: float) -> int:
    """Produce RATE records/s in ticks of TICK_S; returns how many were sent.

    librdkafka (confluent-kafka), in a thread: the load generator and the
    reader must not compete with the worker for a starved CPU more than they
    have to, and aiokafka's per-message send costs several times more.
    """
    client = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "all"})
    rng = random.Random(1)
    sent = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(int(elapsed * RATE) - sent):
            value = record(rng, sent)
            value["ts"] = time.time_ns() // 1000
            client.produce(topic, orjson.dumps(value))
            sent += 1
        client.poll(0)
        time.sleep(TICK_S)
    client.flush(30)
    return sent


def read_latencies(
    bootstrap: str, topic: str, stop: threading.Event, since_us: int
) -> list[tuple[float, float]]:
    """(seconds from produce to readable, of which to the worker's batch) per record since then.

    librdkafka, ``isolation.level=read_committed``, in a thread (see ``steady_load``).
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"latency-reader-{since_us}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    # assigned, not subscribed: no group join delays the first records
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    latencies: list[tuple[float, float]] = []
    try:
        while not stop.is_set():
            # consume(n, timeout) returns only when n messages are buffered or the
            # timeout ends (confluent-kafka <= 2.12): at 10,000 records/s it would add
            # up to its whole timeout to every record. Block on the first message,
            # then take what is already buffered without waiting.
            first = consumer.poll(0.05)
            if first is None:
                continue
            messages = [first, *consumer.consume(10_000, timeout=0)]
            now = time.time_ns() // 1000
            stamps = [
                (orjson.loads(m.value())["ts"], m.timestamp()[1] * 1000)
                for m in messages
                if m.error() is None
            ]
            latencies.extend(
                ((now - ts) / 1e6, (built - ts) / 1e6) for ts, built in stamps if ts >= since_us
            )
    finally:
        consumer.close()
    return latencies


async def steady(
    bootstrap: str, written: str, read: str, seconds: float, *, settle_s: float
) -> tuple[npt.NDArray[np.float64], int]:
    """The steady load on ``written`` for ``seconds`` while ``read`` is read; the reader
    stops ``settle_s`` after the last record is sent. Returns each record's
    (latency, to worker) in seconds, and how many were sent."""
    stop = threading.Event()
    since_us = time.time_ns() // 1000  # earlier records (a warm-up) carry older stamps
    reader = asyncio.create_task(asyncio.to_thread(read_latencies, bootstrap, read, stop, since_us))
    await asyncio.sleep(1.0)  # the reader assigned before the first record
    sent = await asyncio.to_thread(steady_load, bootstrap, written, seconds)
    await asyncio.sleep(settle_s)
    stop.set()
    return np.array(await reader), sent


async def one_size(bootstrap: str, workdir: Path, size: int, seconds: float, burst: int) -> bool:
    topics = await new_topics(bootstrap, f"latency{size}")
    config = write_config(
        workdir / f"latency{size}.yaml",
        bootstrap,
        topics,
        max_batch_records=size,
    )
    worker = Worker(config, workdir, f"latency-{size}", passthrough=False)
    try:
        # warm up: the group join and the first transactions are not steady state
        await preload(bootstrap, topics.raw, 1_000)
        await drain_rate(bootstrap, topics.group, 1_000, [worker], within_s=120)
        latencies, sent = await steady(bootstrap, topics.raw, topics.out, seconds, settle_s=3.0)
    finally:
        worker.stop()
    burst_rate = await burst_drain(bootstrap, topics, config, workdir, 1_000 + sent, burst)
    total, to_worker = latencies.T if len(latencies) else (np.empty(0),) * 2
    p50, p99 = over_sent(total, sent)
    w50, w99 = over_sent(to_worker, sent)
    c50, c99 = over_sent(total - to_worker, sent)
    split = f"{w50:7.1f} {w99:7.1f} {c50:7.1f} {c99:7.1f}"
    print(
        f"{size:>17,} {len(latencies):>9,}/{sent:<9,} {p50:9.1f} {p99:9.1f} {split} "
        f"{burst_rate:14,.0f}",
        flush=True,
    )
    return len(latencies) >= 0.95 * sent


def over_sent(seconds: npt.NDArray[np.float64], sent: int) -> tuple[float, float]:
    """p50 and p99 in ms over every record sent, a record not read by the end counting as
    later than any read (inf).

    Over the records read alone, a run that read 96% of them (it passes) would
    print the percentiles of the records fast enough to be read and leave out the
    slowest: its p99 could be any value. "higher": no interpolation with inf.
    """
    every = np.concatenate([seconds, np.full(max(0, sent - len(seconds)), np.inf)])
    if not len(every):
        return np.nan, np.nan
    p50, p99 = np.percentile(every, [50, 99], method="higher")
    return float(p50) * 1e3, float(p99) * 1e3


async def floor(bootstrap: str, seconds: float) -> None:
    """The harness alone: the load generator writes the topic the reader reads, no worker.

    What this prints is the latency the measurement itself adds (the generator's
    ticks and linger, the broker, the reader's fetch): the floor under every row.
    """
    topics = await new_topics(bootstrap, "latency-floor")
    latencies, sent = await steady(bootstrap, topics.raw, topics.raw, seconds, settle_s=1.0)
    p50, p99 = over_sent(latencies[:, 0] if len(latencies) else np.empty(0), sent)
    print(f"{'no worker (floor)':>17} {len(latencies):>9,}/{sent:<9,} {p50:9.1f} {p99:9.1f}")


async def burst_drain(
    bootstrap: str, topics: Topics, config: Path, workdir: Path, before: int, burst: int
) -> float:
    """Records/s a worker drains a burst at, timed from its first commit past ``before``.

    The burst is written while no worker runs: a worker that kept up with the
    writer would measure the writer (at 10,000-record batches it did, and the
    old harness printed a rate of 0).
    """
    await preload(bootstrap, topics.raw, burst)
    worker = Worker(config, workdir, f"{topics.group}-burst", passthrough=False)
    try:
        burst_run = await drain(
            bootstrap, topics.group, before + burst, [worker], within_s=600, after=before
        )
        return burst_run.rate
    finally:
        worker.stop()


async def run(args: argparse.Namespace) -> int:
    sizes = args.sizes or ([2_000] if args.quick else [200, 2_000, 10_000])
    seconds = 5.0 if args.quick else args.seconds
    burst = 20_000 if args.quick else 100_000
    ok = True
    with broker() as bootstrap, tempfile.TemporaryDirectory(prefix="privstream-bench-") as tmp:
        print(f"steady {RATE:,} records/s for {seconds:g} s, then a burst of {burst:,}")
        header = f"{'max_batch_records':>17} {'read/sent':>19} {'p50 ms':>9} {'p99 ms':>9}"
        split = "to worker p50/p99, commit + read p50/p99 (ms)"
        print(f"{header} {split:31} {'burst rec/s':>14}")
        await floor(bootstrap, min(seconds, 10.0))
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
    print_environment("aiokafka", "confluent-kafka")
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()

"""Produce-to-readable latency at a steady rate, its legs, and the transaction floor.

Three contenders, each on fresh topics, interleaved round by round:

* the harness alone: the load generator writes the topic the reader reads (what
  the measurement itself adds);
* a librdkafka exactly-once pass-through (``bench/peer_librdkafka.py`` taking
  what has arrived, one transaction per batch): the transaction floor;
* `privstream run` at the default settings (``--kafka KEY=VALUE`` changes one);
* with ``--baseline DIR``, the privstream of that checkout at the same settings
  (the code before a change, in the same run).

A librdkafka producer writes the reference record at 10,000 records/s (the
target's rate; ``--rate``) for ``--seconds``, stamping its send time in the
public ``ts`` field, and a librdkafka reader with
``isolation.level=read_committed`` reads the output
(``bench/latency_clients.py``). Both topics stamp the broker's append time
(``LogAppendTime``), so each record's latency splits into legs measured from
outside: *ack* (send to appended on the input), *worker* (appended on the
input to appended on the output: the worker's fetch, its poll, sanitizing,
waiting for the previous transaction, and the produce) and *readable*
(appended on the output to read: offsets, commit, markers and the reader's
fetch). The worker's own ``privstream_batch_stage_duration_seconds`` splits
its part further (scraped from /metrics before it stops).

The total's percentiles count every record sent, a record never read as later
than any read; the legs' count the records read. Exit 1 when the median over
rounds of privstream's p99 is above 100 ms, or a contender read back fewer
than 95% of the records.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import yaml
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kafka import PARTITIONS, Topics, Worker, broker, drain_rate, preload, write_config
from bench.latency_clients import RATE, Read, read_committed, steady_load
from bench.reference import print_environment
from tests.support.broker import create_topics

TARGET_P99_MS = 100.0
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
CONTENDERS = ("harness", "librdkafka", "privstream")


@dataclass
class Row:
    name: str
    sent: int
    read: int
    #: percentiles (p50, p95, p99, max) in ms of the total and of each leg
    quantiles: dict[str, tuple[float, ...]]
    #: the worker's own stage histograms (stage: count, mean ms, p50 and p99 bucket bound)
    stages: dict[str, tuple[int, float, float, float]]
    #: the 1-minute load average as the load began and as it ended
    load: tuple[float, float]
    #: records the generator's client reported undelivered
    failed: int = 0

    @property
    def p99(self) -> float:
        return self.quantiles["total"][2]


def quantiles(ms: npt.NDArray[np.float64]) -> tuple[float, ...]:
    """p50, p95, p99 and max ("higher": no interpolation with inf); nan when empty."""
    if not len(ms):
        return (np.nan,) * 4
    return tuple(float(q) for q in np.percentile(ms, [50, 95, 99, 100], method="higher"))


def legs(reads: list[Read], appended: dict[int, int], sent: int) -> dict[str, tuple[float, ...]]:
    ts = np.array([r.ts_us for r in reads], dtype=np.float64)
    out_ms = np.array([r.appended_ms for r in reads], dtype=np.float64)
    read = np.array([r.read_us for r in reads], dtype=np.float64)
    in_ms = np.array([appended.get(r.ts_us, np.nan) for r in reads], dtype=np.float64)
    total = np.concatenate([(read - ts) / 1e3, np.full(max(0, sent - len(reads)), np.inf)])
    return {
        "total": quantiles(total),
        "ack": quantiles(in_ms[~np.isnan(in_ms)] - ts[~np.isnan(in_ms)] / 1e3),
        "worker": quantiles(out_ms[~np.isnan(in_ms)] - in_ms[~np.isnan(in_ms)]),
        "readable": quantiles(read / 1e3 - out_ms),
    }


async def steady(
    bootstrap: str, written: str, read: str, seconds: float, name: str, rate: int
) -> Row:
    """The steady load on ``written`` while ``read`` is read; the reader stops 3 s after
    the last record is sent."""
    stop = threading.Event()
    since_us = time.time_ns() // 1000  # a warm-up's records carry older stamps
    reader = asyncio.create_task(
        asyncio.to_thread(read_committed, bootstrap, read, PARTITIONS, stop, since_us)
    )
    await asyncio.sleep(1.0)  # the reader assigned before the first record
    before = os.getloadavg()[0]
    load = await asyncio.to_thread(steady_load, bootstrap, written, seconds, rate)
    after = os.getloadavg()[0]
    await asyncio.sleep(3.0)
    stop.set()
    reads = await reader
    quant = legs(reads, load.appended_ms, load.sent)
    return Row(name, load.sent, len(reads), quant, {}, (before, after), load.failed)


def stage_summary(text: str) -> dict[str, tuple[int, float, float, float]]:
    """count, mean ms and the p50 and p99 bucket bounds (ms) of each batch stage."""
    buckets: dict[str, list[tuple[float, float]]] = {}
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "privstream_batch_stage_duration_seconds":
            continue
        for s in family.samples:
            stage = s.labels["stage"]
            if s.name.endswith("_bucket"):
                buckets.setdefault(stage, []).append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_sum"):
                sums[stage] = s.value
    out = {}
    for stage, cumulative in buckets.items():
        count = cumulative[-1][1]
        bound = [next(le for le, c in cumulative if c >= q * count) * 1e3 for q in (0.5, 0.99)]
        out[stage] = (int(count), sums[stage] / max(count, 1) * 1e3, bound[0], bound[1])
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def fresh_topics(bootstrap: str, prefix: str) -> Topics:
    run = os.urandom(3).hex()
    topics = Topics(f"{prefix}.{run}.raw", f"{prefix}.{run}.out", f"{prefix}.{run}.dlq", run)
    await create_topics(bootstrap, [topics.raw, topics.out], PARTITIONS, configs=APPEND_TIME)
    await create_topics(bootstrap, [topics.dlq], PARTITIONS)
    return topics


async def contender(
    name: str,
    bootstrap: str,
    workdir: Path,
    seconds: float,
    kafka: dict[str, object],
    baseline: Path | None = None,
    rate: int = RATE,
) -> Row:
    topics = await fresh_topics(bootstrap, f"latency-{name}")
    if name == "harness":
        return await steady(bootstrap, topics.raw, topics.raw, seconds, name, rate)
    port = free_port()
    path = workdir / f"{name}-{topics.group}.yaml"
    replica = f"{name}-{topics.group}"
    if name == "librdkafka":
        config = write_config(path, bootstrap, topics, http_port=port)
        env = {"PEER_CONSUME": "eager"}
        worker = Worker(
            config, workdir, replica, passthrough=False, script="peer_librdkafka.py", env=env
        )
    else:  # privstream, or the baseline checkout's privstream at the same settings
        config = write_config(path, bootstrap, topics, http_port=port, **kafka)
        env = {} if name == "privstream" else {"PYTHONPATH": str(baseline / "service")}
        worker = Worker(config, workdir, replica, passthrough=False, env=env)
    try:
        # warm up: the group join and the first transactions are not steady state
        await preload(bootstrap, topics.raw, 1_000)
        await drain_rate(bootstrap, topics.group, 1_000, [worker], within_s=120)
        row = await steady(bootstrap, topics.raw, topics.out, seconds, name, rate)
        if name != "librdkafka":
            row.stages = await asyncio.to_thread(scrape, port)
    finally:
        worker.stop()
    return row


def scrape(port: int) -> dict[str, tuple[int, float, float, float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return stage_summary(answer.read().decode())


def ms(values: tuple[float, ...]) -> str:
    return "/".join(f"{v:.1f}" for v in values)


def show(row: Row) -> None:
    q = row.quantiles
    print(
        f"{row.name:>10} {row.read:>7,}/{row.sent:<7,} {ms(q['total']):>26} {ms(q['ack']):>22} "
        f"{ms(q['worker']):>24} {ms(q['readable']):>24}  load {row.load[0]:.1f}-{row.load[1]:.1f}"
        + (f", {row.failed} undelivered" if row.failed else ""),
        flush=True,
    )
    for stage, (count, mean, p50, p99) in row.stages.items():
        print(
            f"{'':>10} worker {stage:>8}: {count:>5} batches, mean {mean:6.1f} ms, "
            f"p50 <= {p50:g} ms, p99 <= {p99:g} ms"
        )


def summary(rows: list[Row]) -> bool:
    """Spread over rounds, the ratio to the floor, and whether the target holds."""
    by_name: dict[str, list[Row]] = {}
    for row in rows:
        by_name.setdefault(row.name, []).append(row)
    print("spread over rounds (p50 / p99, ms):")
    for name, mine in by_name.items():
        p50s = [r.quantiles["total"][0] for r in mine]
        p99s = [r.p99 for r in mine]
        print(
            f"{name:>10}: p50 {min(p50s):.1f}-{max(p50s):.1f}, p99 {min(p99s):.1f}-{max(p99s):.1f}"
        )
    ours, floor = by_name.get("privstream", []), by_name.get("librdkafka", [])
    for o, f in zip(ours, floor, strict=False):
        ratio = [o.quantiles["total"][i] / f.quantiles["total"][i] for i in (0, 2)]
        print(
            f"privstream / librdkafka floor, same round: p50 {ratio[0]:.2f}x, p99 {ratio[1]:.2f}x"
        )
    for o, b in zip(ours, by_name.get("baseline", []), strict=False):
        ratio = [o.quantiles["total"][i] / b.quantiles["total"][i] for i in (0, 2)]
        print(f"privstream / baseline, same round: p50 {ratio[0]:.2f}x, p99 {ratio[1]:.2f}x")
    ok = all(r.read >= 0.95 * r.sent for r in rows)
    if ours:
        median = statistics.median(r.p99 for r in ours)
        print(f"privstream p99, median over rounds: {median:.1f} ms (target {TARGET_P99_MS:g})")
        ok &= median <= TARGET_P99_MS
    return ok


async def run(args: argparse.Namespace) -> int:
    seconds = 5.0 if args.quick else args.seconds
    rounds = 1 if args.quick else args.rounds
    kafka = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.kafka)}
    rows = []
    with broker() as bootstrap, tempfile.TemporaryDirectory(prefix="privstream-bench-") as tmp:
        print(
            f"steady {args.rate:,} records/s for {seconds:g} s; "
            f"privstream settings {kafka or 'default'}"
        )
        print("contender read/sent, total, ack, worker, readable: p50/p95/p99/max ms")
        names = [*(args.only or CONTENDERS), *(["baseline"] if args.baseline else [])]
        for _ in range(rounds):
            for name in names:
                row = await contender(
                    name, bootstrap, Path(tmp), seconds, kafka, args.baseline, args.rate
                )
                show(row)
                rows.append(row)
    return 0 if summary(rows) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of 5 s: a smoke run")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=RATE, help="records/s (the target's: 10,000)")
    parser.add_argument("--only", nargs="*", choices=CONTENDERS, help="run only these")
    parser.add_argument(
        "--kafka", nargs="*", default=[], metavar="KEY=VALUE", help="a privstream kafka setting"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout whose privstream runs too, at the same settings (before/after)",
    )
    args = parser.parse_args()
    print_environment("aiokafka", "confluent-kafka")
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()

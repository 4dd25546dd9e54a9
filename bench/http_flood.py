"""A /metrics scrape flood against `privstream run`: throughput with and without it.

A 4-partition topic is pre-loaded with the reference record (200,000 of them;
``--quick``: 50,000). Round after round (``--rounds``), one `privstream run`
drains all of it as a fresh consumer group twice, once quiet and once while a
flooder process scrapes its ``/metrics`` as fast as it is answered
(``--scrapers`` connections at a time, each connect, GET, read to the close,
again), alternating which goes first. Each drain is timed from its first
commit to its last (``bench.kafka.drain``). Reported per round: records/s
quiet and flooded, their ratio, the scrapes the flood got answered per
second, and the worker's CPU per 100,000 records in both. Target (issue 30):
the flooded drain keeps >= 0.9x the quiet drain's throughput, best round of
each; the median round's ratio is printed beside it.

The flooder runs on this machine, so it takes CPU the worker could have had
(2 cores here, shared with the broker): its own CPU seconds are printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kafka import Drain, Worker, broker, drain, new_topics, preload, write_config
from bench.reference import Targets, print_environment
from tests.support.faults import free_port

TARGET = 0.9


async def flood(port: int, scrapers: int, out: Path) -> None:
    """Scrape until SIGTERM, then write how many scrapes were answered (200)."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    answered = 0

    async def scraper() -> None:
        nonlocal answered
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:  # not listening yet: the worker is starting
                await asyncio.sleep(0.05)
                continue
            with contextlib.suppress(OSError):
                writer.write(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
                response = await reader.read()
                answered += response.startswith(b"HTTP/1.1 200")
            writer.close()

    tasks = [asyncio.create_task(scraper()) for _ in range(scrapers)]
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    out.write_text(str(answered))  # noqa: ASYNC240 -- the process's last act


class Flooder:
    """This script's ``--flood`` mode in a process of its own."""

    def __init__(self, port: int, scrapers: int, workdir: Path, name: str) -> None:
        self.out = workdir / f"{name}.scrapes"
        command = [sys.executable, __file__, "--flood", str(port), "--scrapers", str(scrapers)]
        self.proc = subprocess.Popen([*command, "--out", str(self.out)])
        self.started = time.perf_counter()

    def stop(self) -> tuple[float, float]:
        """(scrapes answered per second, the flooder's CPU seconds)."""
        times = psutil.Process(self.proc.pid).cpu_times()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        elapsed = time.perf_counter() - self.started
        return int(self.out.read_text()) / elapsed, times.user + times.system


async def one_drain(
    bootstrap: str, raw: str, total: int, workdir: Path, name: str, scrapers: int
) -> tuple[Drain, float, float]:
    """A fresh group drains ``raw``; with ``scrapers`` > 0 under a flood of that many.
    Returns the drain, the scrapes answered per second and the flooder's CPU seconds."""
    topics = await new_topics(bootstrap, name)
    topics.raw = raw
    config = write_config(
        workdir / f"{name}.yaml", bootstrap, topics, max_batch_records=10_000, poll_timeout_ms=100
    )
    port = free_port()
    data = yaml.safe_load(config.read_text())
    data["http"]["port"] = port
    config.write_text(yaml.safe_dump(data))
    worker = Worker(config, workdir, name, passthrough=False)
    flooder = Flooder(port, scrapers, workdir, name) if scrapers else None
    try:
        result = await drain(bootstrap, topics.group, total, [worker], within_s=1800)
    finally:
        rate, cpu = flooder.stop() if flooder else (0.0, 0.0)
        worker.stop()
    return result, rate, cpu


def seconds(result: Drain) -> float:
    """The timed span of the drain."""
    return result.records / result.rate


def per_100k(result: Drain) -> float:
    return result.cpu_s / max(result.records, 1) * 100_000


async def run(args: argparse.Namespace) -> int:
    total = 50_000 if args.quick else args.records
    ratios: list[float] = []
    best: dict[str, float] = {"quiet": 0.0, "flood": 0.0}
    with broker() as bootstrap, tempfile.TemporaryDirectory(prefix="privstream-bench-") as tmp:
        workdir = Path(tmp)
        topics = await new_topics(bootstrap, "flood")
        load_rate = await preload(bootstrap, topics.raw, total)
        print(f"pre-loaded {total:,} records into 4 partitions ({load_rate:,.0f} records/s)")
        await one_drain(bootstrap, topics.raw, total, workdir, "warm-up", 0)  # the JVM warms up
        print(
            "round  quiet rec/s (s)  flood rec/s (s)  ratio  scrapes/s  CPU s/100k q, f  "
            "flooder CPU s"
        )
        for round_ in range(args.rounds):
            order = ["quiet", "flood"] if round_ % 2 == 0 else ["flood", "quiet"]
            got: dict[str, tuple[Drain, float, float]] = {}
            for kind in order:
                scrapers = args.scrapers if kind == "flood" else 0
                name = f"{kind}-{round_}"
                got[kind] = await one_drain(bootstrap, topics.raw, total, workdir, name, scrapers)
                best[kind] = max(best[kind], got[kind][0].rate)
            (quiet, _, _), (flooded, scrapes, flooder_cpu) = got["quiet"], got["flood"]
            ratios.append(flooded.rate / quiet.rate)
            print(
                f"{round_:5} {quiet.rate:8,.0f} ({seconds(quiet):4.1f}) "
                f"{flooded.rate:8,.0f} ({seconds(flooded):4.1f}) {ratios[-1]:6.2f} "
                f"{scrapes:10,.0f} {per_100k(quiet):10.2f} {per_100k(flooded):6.2f} "
                f"{flooder_cpu:14.1f}",
                flush=True,
            )
    print(f"\nmedian round ratio {statistics.median(ratios):.2f}x")
    targets = Targets()
    targets.check("flooded / quiet throughput, best of each", best["flood"] / best["quiet"], TARGET)
    return targets.report()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50,000 records")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scrapers", type=int, default=8, help="concurrent flood connections")
    parser.add_argument("--flood", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood:
        asyncio.run(flood(args.flood, args.scrapers, args.out))
        return
    print_environment("aiokafka", "prometheus_client")
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()

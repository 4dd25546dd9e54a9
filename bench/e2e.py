"""End to end with a real broker: `privstream run` against a pass-through worker.

A 4-partition topic is pre-loaded with the reference record (1,000,000 of them;
``--quick``: 100,000). Each scenario then drains all of it as a fresh consumer
group, with transactions on and the same client settings, and reports the
records/s the group committed (from its first commit to its last, so process
start-up and the group join are left out):

* the pass-through worker (``bench/passthrough_worker.py``: the real worker with
  ``process_batch`` swapped for orjson decode + encode);
* `privstream run`, one process;
* `privstream run`, two processes (two replicas of one group).

Targets: privstream >= 0.8x the pass-through; two workers >= 1.6x one. The
broker, the benchmark and the workers share this machine's CPUs: with fewer
than 4 CPUs a second worker has no core of its own, so the scaling target is
reported but not enforced there (see README "Benchmarks").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kafka import Worker, broker, drain_rate, new_topics, preload, write_config
from bench.reference import Targets, print_environment

#: CPUs needed before the 2-worker scaling target is meaningful: two workers + broker/load
SCALING_CPUS = 4


async def scenario(
    bootstrap: str, raw: str, total: int, workdir: Path, name: str, replicas: int, *, pt: bool
) -> float:
    topics = await new_topics(bootstrap, name)
    topics.raw = raw  # every scenario drains the same pre-loaded topic as a new group
    config = write_config(
        workdir / f"{name}.yaml", bootstrap, topics, max_batch_records=10_000, poll_timeout_ms=100
    )
    workers = [Worker(config, workdir, f"{name}-{i}", passthrough=pt) for i in range(replicas)]
    try:
        return await drain_rate(bootstrap, topics.group, total, workers, within_s=1800)
    finally:
        for worker in workers:
            worker.stop()


async def run(args: argparse.Namespace) -> int:
    total = 100_000 if args.quick else args.records
    with broker() as bootstrap, tempfile.TemporaryDirectory(prefix="privstream-bench-") as tmp:
        workdir = Path(tmp)
        topics = await new_topics(bootstrap, "e2e")
        load_rate = await preload(bootstrap, topics.raw, total)
        print(f"pre-loaded {total:,} records into 4 partitions ({load_rate:,.0f} records/s)")
        rates: dict[str, float] = {}
        # the broker (a JVM) warms up over the first drains: alternate the contenders and
        # keep each one's best drain
        order = [("passthrough", 1, True), ("privstream", 1, False)] * (1 if args.quick else 2)
        for round_, (name, replicas, pt) in enumerate([*order, ("privstream-x2", 2, False)]):
            rate = await scenario(
                bootstrap, topics.raw, total, workdir, f"{name}-{round_}", replicas, pt=pt
            )
            rates[name] = max(rates.get(name, 0.0), rate)
            print(f"{name:16} {rate:12,.0f} records/s", flush=True)
    targets = Targets()
    targets.check("privstream / pass-through", rates["privstream"] / rates["passthrough"], 0.8)
    cpus = os.cpu_count() or 1
    targets.check(
        f"2 workers / 1 worker ({cpus} CPUs, enforced from {SCALING_CPUS})",
        rates["privstream-x2"] / rates["privstream"],
        1.6,
        enforced=cpus >= SCALING_CPUS,
    )
    return targets.report()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 records: a smoke run")
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    print_environment("aiokafka")
    sys.exit(asyncio.run(run(args)))


if __name__ == "__main__":
    main()

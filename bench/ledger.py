"""The per-subject ledger's cost: end-to-end throughput on vs off, and memory per subject.

**Throughput.** A 4-partition topic is pre-loaded with the reference record
keyed by its subject (``device_id``, one of 1,000,000 random ids, as the
ledger requires): 1,000,000 records (``--quick``: 100,000). Each scenario
drains all of it as a fresh consumer group, transactions on, and reports
the records/s the group committed from its first commit to its last (as
``bench/e2e.py``): ``privstream run`` without a ledger, and with one
(``privacy.subject: device_id``, a 1d window, cap 60 = 10 records per
subject per window; each scenario has a changelog topic of its own, so a
drain never restores another's spending). The two alternate (``--rounds``,
3) and each keeps its best drain (the broker warms up over the first ones).
Each drain also prints the CPU seconds per 100,000 records of the worker and
of the broker: on two cores the broker's share is as large as the worker's.

**Memory.** The pure ledger in this process (no Kafka): batches of 10,000
records from distinct subjects are charged until 1,000,000 (``--quick``:
200,000) (subject, window) pairs are active; RSS (psutil) is read before
and after, and reported per million active subjects, with the charge rate.

**Restore.** ``bench/ledger_memory.py`` in two processes on one broker: one
charges as many subjects and writes their changelog (its RSS then: the
steady memory), a fresh one restores them as a restarted worker does (its
RSS high-water mark: the restore's peak); the ratio of the two is printed.

Targets: ledger on >= 0.75x ledger off; RSS <= 400 MB per million active
subjects; restore peak <= 1.5x the steady RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kafka import Drain, Topics, Worker, broker, new_topics, preload
from bench.kafka import drain as drain_group
from bench.kafka import write_config as worker_config
from bench.ledger_memory import CHARGE_BATCH, LEDGER, PARTITIONS, policy
from bench.reference import BODY, Targets, print_environment
from tests.support.broker import create_topics

THROUGHPUT_RATIO = 0.75
MB_PER_MILLION = 400.0
RESTORE_RATIO = 1.5


def write_config(path: Path, bootstrap: str, topics: Topics, ledger: dict[str, Any] | None) -> Path:
    body = json.loads(json.dumps(BODY))
    if ledger is not None:
        body["privacy"].update({"subject": "device_id", "ledger": ledger})
    return worker_config(
        path, bootstrap, topics, body=body, max_batch_records=10_000, poll_timeout_ms=100
    )


async def drain(
    bootstrap: str, raw: str, total: int, workdir: Path, name: str, *, with_ledger: bool
) -> Drain:
    topics = await new_topics(bootstrap, name)
    topics.raw = raw  # every scenario drains the same pre-loaded topic as a new group
    ledger = {**LEDGER, "changelog_topic": f"{raw}-ledger-{name}"} if with_ledger else None
    config = write_config(workdir / f"{name}.yaml", bootstrap, topics, ledger)
    worker = Worker(config, workdir, name, passthrough=False)
    try:
        return await drain_group(bootstrap, topics.group, total, [worker], within_s=1800)
    finally:
        worker.stop()


async def throughput(total: int, rounds: int, devices: int | None = None) -> dict[str, float]:
    rates: dict[str, float] = {}
    with broker() as bootstrap, tempfile.TemporaryDirectory(prefix="privstream-bench-") as tmp:
        topics = await new_topics(bootstrap, "ledger")
        load_rate = await preload(
            bootstrap, topics.raw, total, key_field="device_id", devices=devices
        )
        print(
            f"pre-loaded {total:,} subject-keyed records from "
            f"{devices or 1_000_000:,} devices ({load_rate:,.0f} records/s)"
        )
        for round_ in range(rounds):
            for name, on in (("ledger-off", False), ("ledger-on", True)):
                result = await drain(
                    bootstrap, topics.raw, total, Path(tmp), f"{name}-{round_}", with_ledger=on
                )
                rates[name] = max(rates.get(name, 0.0), result.rate)
                per_100k = 100_000 / max(result.records, 1)
                print(
                    f"{name:12} {result.rate:12,.0f} records/s {result.cpu_s * per_100k:6.2f} "
                    f"CPU s/100k (broker {result.broker_cpu_s * per_100k:.2f})",
                    flush=True,
                )
    return rates


def ledger_memory(subjects: int) -> tuple[float, float]:
    """(MB of RSS per million active subject-windows, records/s charged) of the pure ledger."""
    from privstream.ledger import SubjectLedger

    ledger = SubjectLedger(policy=policy(), deployment="bench")
    process = psutil.Process()
    now = int(time.time() * 1000)
    gc.collect()
    before = process.memory_info().rss
    seconds = 0.0
    for start in range(0, subjects, CHARGE_BATCH):
        names = [f"dev-{i:09d}".encode() for i in range(start, start + CHARGE_BATCH)]
        stamps = np.full(len(names), now, dtype=np.int64)
        began = time.perf_counter()
        ledger.charge(start % 4, subjects=names, keys=names, timestamps_ms=stamps, now_ms=now)
        seconds += time.perf_counter() - began
    gc.collect()
    grown = (process.memory_info().rss - before) / 2**20
    active = ledger.active_subject_windows()
    assert active == subjects, (active, subjects)
    return grown / (active / 1e6), subjects / seconds


def restore_memory(subjects: int) -> tuple[dict[str, float], dict[str, float]]:
    """(steady, restore) of ``bench/ledger_memory.py``, each a process of its own."""
    child = Path(__file__).resolve().parent / "ledger_memory.py"
    with broker() as bootstrap:
        topic = f"bench-restore-{secrets.token_hex(4)}"
        asyncio.run(create_topics(bootstrap, [topic], partitions=PARTITIONS))
        measured = []
        for mode in ("steady", "restore"):
            args = [mode, "--bootstrap", bootstrap, "--topic", topic, "--subjects", str(subjects)]
            out = subprocess.run(
                [sys.executable, str(child), *args], check=True, capture_output=True, text=True
            )
            measured.append(json.loads(out.stdout.strip().splitlines()[-1]))
    steady, restored = measured
    assert steady["subjects"] == restored["subjects"] == subjects, (steady, restored)
    return steady, restored


def check_throughput(total: int, rounds: int, targets: Targets, devices: int | None = None) -> None:
    """The on / off drains and their target (also ``bench/e2e.py --ledger``)."""
    rates = asyncio.run(throughput(total, rounds, devices))
    targets.check("ledger on / off", rates["ledger-on"] / rates["ledger-off"], THROUGHPUT_RATIO)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 records: a smoke run")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="alternated drains of each")
    parser.add_argument(
        "--devices",
        type=int,
        help="fold the device ids onto this many subjects (default: 1,000,000 ids, nearly "
        "every record a new subject: the ledger's worst case)",
    )
    parser.add_argument(
        "--memory-only", action="store_true", help="the memory and restore measures only"
    )
    args = parser.parse_args()
    print_environment("aiokafka", "psutil")
    subjects = 200_000 if args.quick else 1_000_000
    per_million, charge_rate = ledger_memory(subjects)
    print(
        f"ledger memory: {per_million:,.0f} MB RSS per million active subjects "
        f"({subjects:,} charged at {charge_rate:,.0f} records/s, one new subject each)"
    )
    targets = Targets()
    steady, restored = restore_memory(subjects)
    ratio = restored["peak_mib"] / steady["rss_mib"]
    print(
        f"restore memory at {subjects:,} subjects: steady {steady['rss_mib']:,.0f} MiB RSS, "
        f"restore peak {restored['peak_mib']:,.0f} MiB (ru_maxrss; "
        f"{restored['rss_mib']:,.0f} MiB after it, {restored['seconds']:.1f} s): "
        f"{ratio:.2f}x steady",
        flush=True,
    )
    if not args.memory_only:
        total = 100_000 if args.quick else args.records
        check_throughput(total, 1 if args.quick else args.rounds, targets, args.devices)
    targets.at_most("RSS per million active subjects", per_million, MB_PER_MILLION, "MB")
    targets.at_most("restore peak / steady RSS", ratio, RESTORE_RATIO, "x")
    sys.exit(targets.report())


if __name__ == "__main__":
    main()

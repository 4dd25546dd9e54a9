"""What the broker benchmarks share: a local broker, topics, a preload, worker processes.

The broker is ``tests/support/broker.py``'s ``LocalBroker`` (the launcher's cached jars, a
work dir of its own, deleted on exit), on this machine, so it competes with the
workers and the load generator for the same CPUs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import OffsetAndMetadata

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.reference import BODY, messages, nested_messages  # noqa: E402
from tests.support.broker import LocalBroker, create_topics  # noqa: E402

PARTITIONS = 4


@contextlib.contextmanager
def broker() -> Iterator[str]:
    """A started local broker (bootstrap servers); stopped and deleted on exit."""
    env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if env:
        yield env
        return
    local = LocalBroker()
    print(f"# starting a local Kafka broker on {local.bootstrap} ...", flush=True)
    try:
        local.start()
        pid = int((Path(local.work_dir) / "kafka.pid").read_text())
        _BROKERS[local.bootstrap] = psutil.Process(pid)
        yield local.bootstrap
    finally:
        _BROKERS.pop(local.bootstrap, None)
        local.close()


#: the local brokers' processes by bootstrap address (a broker from the environment: none)
_BROKERS: dict[str, psutil.Process] = {}


def broker_cpu_seconds(bootstrap: str) -> float:
    """User + system CPU seconds of the local broker so far (0.0 for an external one)."""
    process = _BROKERS.get(bootstrap)
    if process is None:
        return 0.0
    times = process.cpu_times()
    return float(times.user + times.system)


@dataclass
class Topics:
    raw: str
    out: str
    dlq: str
    group: str


async def new_topics(bootstrap: str, prefix: str) -> Topics:
    run = secrets.token_hex(3)
    topics = Topics(f"{prefix}.{run}.raw", f"{prefix}.{run}.out", f"{prefix}.{run}.dlq", run)
    await create_topics(bootstrap, [topics.raw, topics.out, topics.dlq], PARTITIONS)
    return topics


def producer(bootstrap: str, **extra: Any) -> AIOKafkaProducer:
    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "linger_ms": 20,
        "max_batch_size": 512 * 1024,
        "acks": 1,
    }
    options.update(extra)
    return AIOKafkaProducer(**options)


async def preload(
    bootstrap: str,
    topic: str,
    count: int,
    chunk: int = 20_000,
    *,
    key_field: str | None = None,
    devices: int | None = None,
    nested: bool = False,
) -> float:
    """Produce ``count`` reference records to ``topic``, keyed by ``key_field``'s value if
    given (the default partitioner then places them); returns records/s of the load.

    ``devices``: fold the reference ``device_id`` (one of 1,000,000) onto this many.
    ``nested``: the nested records (``bench.reference.nested_messages``) instead.
    """
    make = nested_messages if nested else messages
    started = time.perf_counter()
    client = producer(bootstrap)
    await client.start()
    try:
        for start in range(0, count, chunk):
            batch = make(min(chunk, count - start), seed=start, start=start)
            if devices is not None:
                batch = [_fold_device(value, devices) for value in batch]
            keys = [_key(value, key_field) for value in batch]
            pending = [await client.send(topic, v, key=k) for k, v in zip(keys, batch, strict=True)]
            await asyncio.gather(*pending)
    finally:
        await client.stop()
    return count / (time.perf_counter() - started)


def _fold_device(value: bytes, devices: int) -> bytes:
    record = json.loads(value)
    record["device_id"] = f"dev-{int(record['device_id'][4:]) % devices:06d}"
    return json.dumps(record, separators=(",", ":")).encode()


def _key(value: bytes, field: str | None) -> bytes | None:
    return None if field is None else str(json.loads(value)[field]).encode()


def write_config(
    path: Path,
    bootstrap: str,
    topics: Topics,
    *,
    body: dict[str, Any] | None = None,
    http_port: int = 0,
    **kafka: Any,
) -> Path:
    """A worker config on ``topics`` (``body``: privacy and fields; default the reference;
    ``http_port``: of its /metrics, 0 for any free one)."""
    config = {
        "kafka": {
            "bootstrap_servers": bootstrap,
            "input_topic": topics.raw,
            "output_topic": topics.out,
            "dead_letter_topic": topics.dlq,
            "group_id": topics.group,
            "transactional_id_prefix": topics.group,
            **kafka,
        },
        **(BODY if body is None else body),
        "http": {"host": "127.0.0.1", "port": http_port},
    }
    path.write_text(yaml.safe_dump(config))
    return path


class Worker:
    """``privstream run`` (or the pass-through worker) as a subprocess."""

    def __init__(
        self,
        config: Path,
        workdir: Path,
        replica: str,
        *,
        passthrough: bool,
        script: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """``script``: a file in bench/ to run instead (``env``: added to its environment)."""
        key = workdir / f"noise-{replica}.key"
        key.write_text(secrets.token_hex(32) + "\n")
        if passthrough:
            script = "passthrough_worker.py"
        entry = [str(ROOT / "bench" / script)] if script else ["-m", "privstream.cli.main"]
        self.log = workdir / f"worker-{replica}.log"
        self._log = self.log.open("ab")
        command = [*entry, "run", "--config", str(config), "--noise-key-file", str(key)]
        self.proc = subprocess.Popen(
            [sys.executable, *command, "--replica-id", replica, "--log-level", "INFO"],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=self._log,
            stderr=self._log,
        )

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._log.close()
        return code


@contextlib.asynccontextmanager
async def admin(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def committed(client: AIOKafkaAdminClient, group: str) -> int:
    """Records the group has committed (summed over partitions; 0 before the first commit)."""
    try:
        offsets: dict[TopicPartition, OffsetAndMetadata] = await client.list_consumer_group_offsets(
            group
        )
    except Exception:  # the group does not exist yet
        return 0
    return sum(max(meta.offset, 0) for meta in offsets.values())


@dataclass
class Drain:
    """A group's drain: records/s from its first commit to its last, and the CPU it took."""

    rate: float
    #: CPU seconds (user + system) the workers spent between those two commits
    cpu_s: float
    records: int
    #: the local broker's CPU seconds over the same span (0.0 for an external broker)
    broker_cpu_s: float = 0.0


def cpu_seconds(workers: list[Worker]) -> float:
    """User + system CPU seconds of the worker processes (all their threads) so far."""
    total = 0.0
    for worker in workers:
        times = psutil.Process(worker.proc.pid).cpu_times()
        total += times.user + times.system
    return total


async def drain(
    bootstrap: str,
    group: str,
    total: int,
    workers: list[Worker],
    within_s: float,
    *,
    after: int = 0,
) -> Drain:
    """Time the group from its first commit past ``after`` records until all ``total``
    records are committed.

    The workers' CPU is read at the same two polls (every 0.1 s), so start-up
    and the group join are left out of both.
    """
    async with admin(bootstrap) as client:
        deadline = time.monotonic() + within_s
        first: tuple[float, int, float, float] | None = None
        while True:
            done = await committed(client, group)
            now = time.perf_counter()
            if first is None and done > after:
                first = (now, done, cpu_seconds(workers), broker_cpu_seconds(bootstrap))
            if done >= total and first is not None:
                rate = (done - first[1]) / max(now - first[0], 1e-9)
                cpu, broker_cpu = cpu_seconds(workers), broker_cpu_seconds(bootstrap)
                return Drain(rate, cpu - first[2], done - first[1], broker_cpu - first[3])
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {done:,} of {total:,} records committed")
            for worker in workers:
                if worker.proc.poll() is not None:
                    raise RuntimeError(f"worker exited early; see {worker.log}")
            await asyncio.sleep(0.1)


async def drain_rate(
    bootstrap: str, group: str, total: int, workers: list[Worker], within_s: float
) -> float:
    """Records/s the group commits, from its first commit until all ``total`` are committed."""
    return (await drain(bootstrap, group, total, workers, within_s)).rate

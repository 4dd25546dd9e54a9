"""Run `privstream run` as a real subprocess and talk to Kafka like a user would."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from privstream.config import load_config
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import process_batch
from privstream.pipeline.noise import Replayable

ROOT = Path(__file__).resolve().parents[2]


def unique_topics(prefix: str) -> dict[str, str]:
    run = secrets.token_hex(4)
    return {
        "input_topic": f"{prefix}.{run}.raw",
        "output_topic": f"{prefix}.{run}.sanitized",
        "dead_letter_topic": f"{prefix}.{run}.dlq",
        "group_id": f"{prefix}.{run}",
        # one transactional id space per test: a killed worker's open transaction
        # never stalls another test's worker
        "transactional_id_prefix": f"{prefix}.{run}",
    }


def write_config(path: Path, bootstrap: str, kafka: dict[str, Any], body: dict[str, Any]) -> Path:
    config = {"kafka": {"bootstrap_servers": bootstrap, **kafka}, **body}
    config.setdefault("http", {"host": "127.0.0.1", "port": 0})
    path.write_text(yaml.safe_dump(config))
    return path


#: the privacy section of the e2e, broker-restart and rebalance workers
PRIVACY: dict[str, Any] = {
    "privacy": {"epsilon": 2.0, "delta": 1.0e-6},
    "fields": [
        {"name": "device_id", "kind": "drop"},
        {"name": "seq", "kind": "public"},
        {
            "name": "salary",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": [1504, 4500],
            "epsilon": 1.0,
        },
        {"name": "state", "kind": "categorical", "domain": ["TX", "CA", "NY"], "epsilon": 0.5},
        {"name": "opted_in", "kind": "boolean", "epsilon": 0.5, "delta": 1.0e-6},
    ],
}

#: the noise key of the test workers (fixed in tests only, so expected outputs can be recomputed)
TEST_SECRET = bytes(range(100, 132))


class WorkerProcess:
    """`privstream run --config C` in its own process, stdout and stderr kept in ``log``.

    The worker gets ``secret`` through a key file next to the log, a replica id
    (two live workers need different ones: the id is their transactional id),
    DEBUG logging, so tests can check the logs hold no raw value, and ``env``
    on top of this process's environment.
    """

    def __init__(
        self,
        config: Path,
        log: Path,
        *,
        secret: bytes = TEST_SECRET,
        replica_id: str = "0",
        log_level: str = "DEBUG",
        env: Mapping[str, str] | None = None,
        module: str = "privstream.cli.main",
    ) -> None:
        self.config = config
        self.module = module  # run with ``python -m``: the CLI, or a test launcher of it
        self.log = log
        self.replica_id = replica_id
        self.log_level = log_level
        #: added to this process's environment (a fault-injection hook, say)
        self.env = dict(env or {})
        self.key_file = log.with_suffix(".key")
        self.key_file.write_text(secret.hex() + "\n")
        self.key_file.chmod(0o600)  # as a mounted Secret: the worker warns about readable keys
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, *extra: str) -> None:
        self._log_fh = self.log.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            self.module,
            "run",
            "--config",
            str(self.config),
            "--noise-key-file",
            str(self.key_file),
            "--replica-id",
            self.replica_id,
            "--log-level",
            self.log_level,
            *extra,
            cwd=ROOT,
            env={**os.environ, **self.env},
            stdout=self._log_fh,
            stderr=self._log_fh,
        )

    async def terminate(self, within_s: float = 60) -> int:
        """SIGTERM, wait for the exit code (the in-flight batch is committed first)."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), within_s)
        self._log_fh.close()
        return code

    async def wait(self, within_s: float) -> int:
        """The exit code of a worker that stops by itself; TimeoutError if it does not."""
        assert self.proc is not None
        try:
            code = await asyncio.wait_for(self.proc.wait(), within_s)
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
            self._log_fh.close()
        return code

    async def kill(self) -> int:
        """SIGKILL: no clean-up of any kind, like a crashed node."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.kill()
        code = await self.proc.wait()
        self._log_fh.close()
        return code

    def pause(self) -> None:
        """SIGSTOP: the worker freezes mid-step (sends nothing more, commits nothing)."""
        assert self.proc is not None and self.proc.returncode is None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: a paused worker carries on where it froze."""
        assert self.proc is not None and self.proc.returncode is None
        self.proc.send_signal(signal.SIGCONT)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


Message = tuple[bytes | None, bytes, list[tuple[str, bytes]]]


async def produce(
    bootstrap: str,
    topic: str,
    messages: Sequence[Message],
    timestamps: Sequence[int | None] | None = None,
) -> list[tuple[int, int]]:
    """Produce (key, value, headers) messages, with Kafka timestamps if given (None: now);
    return each one's (partition, offset)."""
    stamps = [None] * len(messages) if timestamps is None else timestamps
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks="all")
    await producer.start()
    try:
        pending = [
            await producer.send(topic, value, key=key, headers=headers, timestamp_ms=ts)
            for (key, value, headers), ts in zip(messages, stamps, strict=True)
        ]
        written = await asyncio.gather(*pending)
        return [(meta.partition, meta.offset) for meta in written]
    finally:
        await producer.stop()


def replay_expected(
    config: Path, secret: bytes, topic: str, coords: list[tuple[int, int]], values: list[bytes]
) -> list[bytes | None]:
    """What an uncrashed worker with ``secret`` makes of each input: its sanitized bytes,
    or None for a dead letter. Computed offline with the pipeline and keyed noise."""
    plan = build_plan(load_config(config))
    partitions = np.array([p for p, _ in coords], dtype=np.int64)
    offsets = np.array([o for _, o in coords], dtype=np.int64)
    noise = Replayable(NoiseKeys(secret, topic), partitions, offsets, values)
    result = process_batch(plan, values, noise)
    out: list[bytes | None] = [None] * len(values)
    for index, value in zip(result.output_index, result.outputs, strict=True):
        out[index] = value
    return out


class Collector:
    """Reads a topic from its beginning into ``records`` until the context exits.

    ``read_committed`` unless told otherwise; ``consumer_options`` go to the
    consumer as they are. Waiters are woken after every fetch.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        isolation_level: str = "read_committed",
        **consumer_options: Any,
    ) -> None:
        self.topic = topic
        self.isolation_level = isolation_level
        self.records: list[ConsumerRecord] = []
        self._consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            isolation_level=isolation_level,
            enable_auto_commit=False,
            **consumer_options,
        )
        self._grew = asyncio.Condition()

    async def __aenter__(self) -> Self:
        await self._consumer.start()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self._consumer.stop()

    async def _run(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=200)
            new = [m for msgs in batches.values() for m in msgs]
            if new:
                async with self._grew:
                    self._add(new)
                    self._grew.notify_all()

    def _add(self, new: list[ConsumerRecord]) -> None:
        self.records.extend(new)

    async def wait_for(self, count: int, within_s: float) -> list[ConsumerRecord]:
        """Wait until at least ``count`` records arrived; fail loudly on timeout."""
        async with self._grew:
            await asyncio.wait_for(
                self._grew.wait_for(lambda: len(self.records) >= count), within_s
            )
        return list(self.records)


def decode(records: list[ConsumerRecord]) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in records]


async def read_all(bootstrap: str, topic: str, partitions: int) -> list[ConsumerRecord]:
    """Every committed record of ``topic``, up to its end offsets at call time."""
    return await read_partitions(bootstrap, topic, partitions, "read_committed")


async def read_partitions(
    bootstrap: str, topic: str, partitions: int, isolation_level: str, within_s: float | None = None
) -> list[ConsumerRecord]:
    """Every record of ``topic`` up to its end offsets at call time, read with
    ``isolation_level``; fail after ``within_s`` (None: no deadline)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation_level, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        out: list[ConsumerRecord] = []

        async def drain() -> None:
            while [tp for tp in tps if await consumer.position(tp) < end[tp]]:
                batches = await consumer.getmany(*tps, timeout_ms=500)
                out.extend(m for msgs in batches.values() for m in msgs)

        await asyncio.wait_for(drain(), within_s)
        return out
    finally:
        await consumer.stop()


@contextlib.asynccontextmanager
async def started(worker: WorkerProcess, *extra: str) -> AsyncIterator[int]:
    """Start ``worker`` (``extra``: more ``run`` options), yield its pid; on the way out,
    kill it if a failed test left it running."""
    await worker.start(*extra)
    assert worker.proc is not None
    try:
        yield worker.proc.pid
    finally:
        if worker.alive:
            await worker.kill()
        log_fh = getattr(worker, "_log_fh", None)  # an exited worker's log is still open
        if log_fh is not None and not log_fh.closed:
            log_fh.close()


def raw_in_log(log: str) -> list[str]:
    """Log lines holding a canary (a raw key, header or value), cut to their start."""
    return [line[:300] for line in log.splitlines() if "CANARY" in line]


async def wait_while_alive(
    collector: Collector, count: int, worker: WorkerProcess, within_s: float
) -> None:
    """Wait for ``count`` records; fail at once if the worker exits, with counts on timeout."""
    assert worker.proc is not None
    arrived = asyncio.create_task(collector.wait_for(count, within_s))
    exited = asyncio.create_task(worker.proc.wait())
    await asyncio.wait({arrived, exited}, return_when=asyncio.FIRST_COMPLETED)
    exited.cancel()
    if not arrived.done():
        arrived.cancel()
        await asyncio.gather(arrived, return_exceptions=True)
        raise AssertionError(
            f"worker exited ({worker.proc.returncode}) with {len(collector.records)}/{count} "
            f"records written:\n{worker.log_text()[-5000:]}"
        )
    if arrived.exception() is not None:
        raise AssertionError(
            f"only {len(collector.records)}/{count} records within {within_s}s:\n"
            f"{worker.log_text()[-5000:]}"
        ) from arrived.exception()

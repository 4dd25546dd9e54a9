"""Run `privstream run` as a real subprocess and talk to Kafka like a user would."""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import sys
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

ROOT = Path(__file__).resolve().parents[2]


def unique_topics(prefix: str) -> dict[str, str]:
    run = secrets.token_hex(4)
    return {
        "input_topic": f"{prefix}.{run}.raw",
        "output_topic": f"{prefix}.{run}.sanitized",
        "dead_letter_topic": f"{prefix}.{run}.dlq",
        "group_id": f"{prefix}.{run}",
    }


def write_config(path: Path, bootstrap: str, kafka: dict[str, Any], body: dict[str, Any]) -> Path:
    config = {"kafka": {"bootstrap_servers": bootstrap, **kafka}, **body}
    config.setdefault("http", {"host": "127.0.0.1", "port": 0})
    path.write_text(yaml.safe_dump(config))
    return path


class WorkerProcess:
    """`privstream run --config C` in its own process, stderr kept in a file."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config = config
        self.log = log
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, *extra: str) -> None:
        self._log_fh = self.log.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "service.cli.main",
            "run",
            "--config",
            str(self.config),
            *extra,
            cwd=ROOT,
            stdout=self._log_fh,
            stderr=self._log_fh,
        )

    async def terminate(self, within_s: float = 60) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), within_s)
        self._log_fh.close()
        return code

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


async def produce(
    bootstrap: str, topic: str, messages: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks="all")
    await producer.start()
    try:
        for key, value, headers in messages:
            await producer.send(topic, value, key=key, headers=headers)
        await producer.flush()
    finally:
        await producer.stop()


class Collector:
    """Reads a topic with read_committed into ``records`` until told to stop."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.records: list[ConsumerRecord] = []
        self._consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            enable_auto_commit=False,
        )
        self._grew = asyncio.Condition()

    async def __aenter__(self) -> Collector:
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
                    self.records.extend(new)
                    self._grew.notify_all()

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
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        out: list[ConsumerRecord] = []
        while [tp for tp in tps if await consumer.position(tp) < end[tp]]:
            batches = await consumer.getmany(*tps, timeout_ms=500)
            out.extend(m for msgs in batches.values() for m in msgs)
        return out
    finally:
        await consumer.stop()

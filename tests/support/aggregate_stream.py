"""`privstream run` with aggregates: a config, the internal topic, and the rows expected.

The expected rows are computed offline from the input topic's records with
the file-mode pieces (``AggregatePlan.accumulator``, ``merge``, ``release``)
and the test noise key: what a worker that never crashed releases.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from functools import reduce
from operator import attrgetter
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiokafka import ConsumerRecord
from aiokafka.admin import AIOKafkaAdminClient
from privstream.aggregates import KeyedCells, Partial, build_aggregates, merge, release
from privstream.aggregates.windows import View, window_label, window_start
from privstream.config import load_config

from tests.support.broker import create_topics
from tests.support.worker_proc import (
    TEST_SECRET,
    WorkerProcess,
    produce,
    read_all,
    unique_topics,
    write_config,
)

PARTITIONS = 2
FIELDS: list[dict[str, Any]] = [
    {"name": "user", "kind": "drop"},
    {"name": "os", "kind": "categorical", "domain": ["ios", "android", "web"], "epsilon": 0.5},
    {"name": "latency", "kind": "real", "bounds": [0, 100], "epsilon": 0.5},
]


#: ``setup(time=TIME_FIELD)``: the field ``window.time`` reads (epoch milliseconds)
TIME_FIELD: dict[str, Any] = {
    "name": "seen_at",
    "kind": "timestamp",
    "granularity": "1s",
    "epoch_unit": "ms",
}


def aggregates(
    topic: str, size_s: int, grace_s: int, time: str | None = None
) -> list[dict[str, Any]]:
    window: dict[str, Any] = {"size_seconds": size_s, "grace_seconds": grace_s}
    if time is not None:
        window["time"] = time
    common = {"epsilon": 1.0, "window": window, "output_topic": topic}
    return [
        {"name": "by_os", "query": "histogram", "field": "os", **common},
        {"name": "mean_latency", "query": "mean", "field": "latency", "bounds": [0, 100], **common},
    ]


async def setup(
    bootstrap: str, tmp: Path, prefix: str, size_s: int, grace_s: int, time: str | None = None
) -> tuple[dict[str, str], str, Path]:
    """Created topics (input with ``PARTITIONS``), the aggregates' topic and the config
    (``time``: windows from that field, ``TIME_FIELD``, instead of the Kafka timestamp)."""
    kafka = unique_topics(prefix)
    out = f"{kafka['input_topic']}.aggregates"
    await create_topics(bootstrap, [kafka["input_topic"]], partitions=PARTITIONS)
    await create_topics(bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"], out])
    body = {
        "privacy": {"epsilon": 10.0, "delta": 1e-6},
        "fields": FIELDS if time is None else [*FIELDS, TIME_FIELD],
        "aggregates": aggregates(out, size_s, grace_s, time),
    }
    return kafka, out, write_config(tmp / "config.yaml", bootstrap, kafka, body)


@contextlib.asynccontextmanager
async def running(worker: WorkerProcess) -> AsyncIterator[None]:
    """A started worker, killed on the way out if it still runs (a failed test)."""
    try:
        yield
    finally:
        if worker.alive:
            await worker.kill()


def with_kafka(config: Path, extra: dict[str, Any]) -> Path:
    """The config with these ``kafka:`` settings added."""
    body = yaml.safe_load(config.read_text())
    body["kafka"].update(extra)
    config.write_text(yaml.safe_dump(body))
    return config


async def produce_to(
    bootstrap: str, topic: str, index: Iterable[int], stamps: Sequence[int]
) -> None:
    """``record(i)`` for each i, keyed by its user, with these Kafka timestamps, in order."""
    messages = [(f"u{i % 37}".encode(), record(i), []) for i in index]
    await produce(bootstrap, topic, messages, list(stamps))


async def produce_window(bootstrap: str, topic: str, index: Sequence[int]) -> int:
    """``record(i)`` for each i, stamped ascending in the wall clock's next window of 1 s
    (never late while the worker reads it within the grace); returns that window's start."""
    start = window_start(time.time_ns() // 1_000_000, 1000) + 1000
    stamps = [start + j * (1000 // len(index)) for j in range(len(index))]
    await produce_to(bootstrap, topic, index, stamps)
    return start


def internal_topic(kafka: dict[str, str]) -> str:
    return f"{kafka['input_topic']}-privstream-aggregates"


async def view(bootstrap: str, kafka: dict[str, str]) -> View:
    """The internal topic's committed state (empty before the worker created it: asked
    without auto-creation, which would make it with the broker's defaults)."""
    state = View()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:  # a request for every topic: it creates none
        exists = internal_topic(kafka) in await admin.list_topics()
    finally:
        await admin.close()
    if exists:
        for record in await read_all(bootstrap, internal_topic(kafka), 1):
            state.apply(record.key, record.value)
    return state


def record(i: int) -> bytes:
    os_name = ("ios", "android", "web")[i % 3]
    return json.dumps({"user": f"u{i % 37}", "os": os_name, "latency": (i * 7) % 120}).encode()


def expected(
    config: Path,
    inputs: Sequence[ConsumerRecord],
    starts: Sequence[int],
    size_s: int,
    time_of: Callable[[ConsumerRecord], int | None] = attrgetter("timestamp"),
) -> dict[tuple[str, str, str], bytes]:
    """(aggregate, window label, group JSON) -> the row's bytes, for each window start
    (``time_of``: a record's time, None to leave it out; the Kafka timestamp by default)."""
    loaded = load_config(config)
    noise = KeyedCells(TEST_SECRET, loaded.kafka.input_topic, loaded.kafka.noise_domain)
    size = size_s * 1000
    out = {}
    for plan in build_aggregates(loaded):
        for start in starts:
            label = window_label(start, size)
            parts = []
            for partition in range(PARTITIONS):
                acc = plan.accumulator(label)
                for m in sorted(inputs, key=lambda m: m.offset):
                    at = time_of(m)
                    if (
                        m.partition == partition
                        and at is not None
                        and window_start(at, size) == start
                    ):
                        acc.add(orjson.loads(m.value))
                parts.append(acc.partial())
            merged = reduce(merge, parts, Partial(plan.name, label))
            for row in release(plan, merged, noise):
                out[plan.name, label, _group(row["group"])] = orjson.dumps(row)
    return out


def released(records: Sequence[ConsumerRecord]) -> dict[tuple[str, str, str], list[bytes]]:
    """Each released (aggregate, window, group) and the values of its copies."""
    out: dict[tuple[str, str, str], list[bytes]] = {}
    for m in records:
        row = orjson.loads(m.value)
        out.setdefault((row["aggregate"], row["window"], _group(row["group"])), []).append(m.value)
    return out


def _group(group: dict[str, Any]) -> str:
    return json.dumps(group, sort_keys=True)

"""Partitions stopped before an undecodable batch: counted, logged, paused, and over only
once a commit moves past the batch (issue 30)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka import TopicPartition
from privstream.errors import UndecodableBatchError
from privstream.metrics import Metrics
from privstream.worker import stalls
from privstream.worker.stalls import Stalls
from prometheus_client import CollectorRegistry

RAW0, RAW1 = TopicPartition("raw", 0), TopicPartition("raw", 1)


def stop(topic: str, partition: int, offset: int) -> UndecodableBatchError:
    return UndecodableBatchError(topic, partition, offset, ValueError("zstd: incomplete frame"))


def count(metrics: Metrics, topic: str, partition: int) -> float | None:
    return metrics.registry.get_sample_value(
        "privstream_undecodable_batches_total", {"topic": topic, "partition": str(partition)}
    )


class Consumer:
    """The four calls ``Stalls`` makes on an AIOKafkaConsumer."""

    def __init__(self, assigned: set[TopicPartition]) -> None:
        self._assigned = assigned
        self._paused: set[TopicPartition] = set()
        self.resumed = asyncio.Event()

    def assignment(self) -> set[TopicPartition]:
        return set(self._assigned)

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def pause(self, tp: TopicPartition) -> None:
        self._paused.add(tp)

    def resume(self, tp: TopicPartition) -> None:
        self._paused.discard(tp)
        self.resumed.set()


async def test_an_input_stop_is_counted_logged_and_paused_then_fetched_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics(CollectorRegistry())
    found = Stalls(metrics)
    consumer = Consumer({RAW0, RAW1})
    monkeypatch.setattr(stalls, "RETRY_S", 0.0)
    with caplog.at_level(logging.ERROR, "privstream.worker"):
        found.pause(consumer, stop("raw", 1, 40))  # type: ignore[arg-type]
    assert found and count(metrics, "raw", 1) == 1
    assert consumer.paused() == {RAW1}
    (line,) = caplog.records
    assert line.levelno == logging.ERROR
    assert "raw/1: the record batch at offset 40 cannot be decoded" in line.getMessage()
    assert "fetching it again in 0 s" in line.getMessage()
    await asyncio.wait_for(consumer.resumed.wait(), 5)
    assert consumer.paused() == set()


async def test_a_revoked_partition_is_not_paused() -> None:
    found = Stalls(Metrics(CollectorRegistry()))
    consumer = Consumer({RAW0})
    found.pause(consumer, stop("raw", 1, 40))  # type: ignore[arg-type]
    assert consumer.paused() == set()
    found.keep({0})  # its new owner reports it
    assert not found


def test_a_stop_is_over_only_once_a_commit_moves_past_its_offset() -> None:
    found = Stalls(Metrics(CollectorRegistry()))
    found.report(stop("raw", 0, 10), "retrying")
    found.committed(RAW0, 10)  # records before the batch: it still stops the partition
    found.committed(RAW1, 99)  # another partition
    assert found
    found.committed(RAW0, 11)
    assert not found


def test_a_changelog_stop_is_over_once_its_input_partition_commits() -> None:
    """A committed batch of input partition p was charged: p's restore completed."""
    found = Stalls(Metrics(CollectorRegistry()))
    found.report(stop("raw-privstream-ledger", 2, 5000), "restoring again")
    found.committed(TopicPartition("raw", 1), 3)
    assert found
    found.committed(TopicPartition("raw", 2), 3)
    assert not found

"""Partitions stopped before a record batch that cannot be decoded: reported, retried, and
readiness off while any is.

A batch the client cannot read (``UndecodableBatchError``: a codec that is
not installed, a bad CRC, a corrupt compressed payload) is never skipped:
its records are unknown, and moving past it would drop them unreported.
On the input, the consumer raises it at a ``getmany`` that took no record
(``privstream.kafka.decode``) and the partition is paused for
``RETRY_S``, then fetched again: the other partitions go on, and a batch
garbled in transit decodes on a later try. On the changelog, the restore
fails and the session restarts with backoff: a partition restored without
some of its spending would reopen budgets. Either way each failed try counts
in ``privstream_undecodable_batches_total``, logs an ERROR naming topic,
partition and offset, and ``/readyz`` answers 503 until the partition moves
past the batch (or is revoked). docs/operations.md has the operator's
recovery for a batch that never decodes.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer, TopicPartition

from privstream.errors import UndecodableBatchError
from privstream.metrics import Metrics

log = logging.getLogger("privstream.worker")

#: how long an input partition stays paused before its batch is fetched again
RETRY_S = 10.0


class Stalls:
    """The partitions stopped before an undecodable batch, by (topic, partition)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._stopped: dict[tuple[str, int], UndecodableBatchError] = {}

    def __bool__(self) -> bool:
        return bool(self._stopped)

    def report(self, exc: UndecodableBatchError, retry: str) -> None:
        """Count, log and remember a failed read; ``retry`` says what happens next."""
        self._stopped[exc.topic, exc.partition] = exc
        self._metrics.undecodable_batches.labels(exc.topic, str(exc.partition)).inc()
        log.error("%s; %s", exc, retry)

    def pause(self, consumer: AIOKafkaConsumer, exc: UndecodableBatchError) -> None:
        """Report an input batch and pause its partition for ``RETRY_S`` (the others go on)."""
        self.report(exc, f"fetching it again in {RETRY_S:g} s")
        tp = TopicPartition(exc.topic, exc.partition)
        if tp in consumer.assignment():  # else revoked meanwhile: its new owner reads it
            consumer.pause(tp)
            asyncio.get_running_loop().call_later(RETRY_S, _resume, consumer, tp)

    def committed(self, tp: TopicPartition, next_offset: int) -> None:
        """A batch of input partition ``tp`` committed up to ``next_offset``: a stop at an
        earlier offset is over, and so is one of its changelog partition (the batch was
        charged, so the partition's restore completed)."""
        for (topic, partition), exc in list(self._stopped.items()):
            past = topic != tp.topic or exc.offset < next_offset
            if partition == tp.partition and past:
                del self._stopped[topic, partition]
                log.info("%s/%d moved past offset %d", topic, partition, exc.offset)

    def keep(self, partitions: set[int]) -> None:
        """Forget stops of partitions no longer assigned (their new owner reports them)."""
        for key in [key for key in self._stopped if key[1] not in partitions]:
            del self._stopped[key]


def _resume(consumer: AIOKafkaConsumer, tp: TopicPartition) -> None:
    if tp in consumer.assignment() and tp in consumer.paused():
        consumer.resume(tp)

"""What the worker does when its partitions move.

A revoke waits for the transaction in flight (partitions move only between
batches) and voids the batch fetched meanwhile; an assignment checks whether
the group is about to release retained records it never committed (a second
release if they were released before: docs/operations.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

if TYPE_CHECKING:
    from privstream.worker.loop import Worker

log = logging.getLogger("privstream.worker")
#: how long an assignment may spend on the committed-offset check (a warning only)
CHECK_TIMEOUT_S = 10.0


class Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """Partitions move only between batches: a revoke waits for the batch in flight."""

    def __init__(self, worker: Worker, consumer: AIOKafkaConsumer) -> None:
        self._worker = worker
        self._consumer = consumer

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        async with self._worker._batch_lock:
            self._worker._assigned.difference_update(revoked)
            self._worker._generation += 1  # a batch fetched before is not released
            if self._worker._ledger is not None:
                await self._worker._ledger.revoked(revoked)
        lag = self._worker._metrics.consumer_lag
        for tp in revoked:  # another replica reports these now
            with contextlib.suppress(KeyError):
                lag.remove(str(tp.partition))
        log.info("partitions revoked: %s", names(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._worker._assigned = set(assigned)
        self._worker._generation += 1
        if self._worker._ledger is not None:  # restored before its records are charged
            self._worker._ledger.assigned(assigned)
        log.info("partitions assigned: %s", names(assigned))
        try:
            await asyncio.wait_for(
                warn_first_release(self._consumer, assigned, self._worker._kafka.group_id),
                CHECK_TIMEOUT_S,
            )
        except (TimeoutError, KafkaError, OSError) as exc:  # a warning only: never block
            log.debug("could not check committed offsets: %s", type(exc).__name__)


async def warn_first_release(
    consumer: AIOKafkaConsumer, assigned: set[TopicPartition], group: str
) -> int:
    """WARNING when the group starts partitions that retain records it never committed.

    A group without a committed offset starts at the earliest retained record
    (``auto_offset_reset: earliest``), so a new ``group_id``, an offset reset or
    a second deployment releases every retained record again. With noise bound
    to the release that is safe against cancellation, but it is a second
    release of those records whose epsilon adds to the first one's (docs,
    "Operations"). Returns how many retained records are about to be released.
    """
    fresh = [tp for tp in sorted(assigned) if await consumer.committed(tp) is None]
    if not fresh:
        return 0
    first = await consumer.beginning_offsets(fresh)
    end = await consumer.end_offsets(fresh)
    retained = int(sum(end[tp] - first[tp] for tp in fresh))
    if retained:
        log.warning(
            "group %s has no committed offset on %s: it is about to release %d retained "
            "record(s) from the earliest offset. If another group, deployment or earlier "
            "config released them already, this is a second release and the epsilons add "
            "(see docs/operations.md)",
            group,
            names(set(fresh)),
            retained,
        )
    return retained


def names(tps: set[TopicPartition]) -> str:
    return ", ".join(sorted(f"{tp.topic}/{tp.partition}" for tp in tps)) or "none"

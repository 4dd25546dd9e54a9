"""What the worker does when its partitions move.

A revoke waits for the transaction in flight (partitions move only between
batches) and voids the batch fetched meanwhile. An assignment starts each
partition at its committed offset read with ``require_stable``
(``stable_offsets``), and checks whether the group is about to release
retained records it never committed (a second release if they were released
before: docs/operations.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from privstream.config import KafkaConfig
from privstream.config.runtime import Runtime
from privstream.metrics import Metrics
from privstream.worker.assignment import Assignment
from privstream.worker.clients import common_options, open_transaction_wait_s
from privstream.worker.generation_fence import member_of
from privstream.worker.ledger_store import LedgerStore
from privstream.worker.stable_offsets import stable_committed

log = logging.getLogger("privstream.worker")
#: how long an assignment may spend on the committed-offset check (a warning only)
CHECK_TIMEOUT_S = 10.0


class Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """Partitions move only between batches: a revoke waits for the batch in flight."""

    def __init__(
        self,
        assignment: Assignment,
        consumer: AIOKafkaConsumer,
        connection: tuple[KafkaConfig, Runtime],
        ledger: LedgerStore | None,
        metrics: Metrics,
    ) -> None:
        self._assignment = assignment
        self._consumer = consumer
        self._kafka, self._runtime = connection
        self._ledger = ledger
        self._metrics = metrics

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        async with self._assignment.batch_lock:
            self._assignment.revoke(revoked)  # a batch fetched before is not released
            if self._ledger is not None:
                await self._ledger.revoked(revoked)
        lag = self._metrics.consumer_lag
        for tp in revoked:  # another replica reports these now
            with contextlib.suppress(KeyError):
                lag.remove(str(tp.partition))
        log.info("partitions revoked: %s", names(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        # paused first: aiokafka starts fetching at its own reading of the committed
        # offsets while this runs; nothing of these partitions may be taken before they
        # start where the stable reading says (a paused partition's records are never
        # returned, and its position does not move)
        self._consumer.pause(*assigned)
        # what this assignment commits as (the group generation: zombie fencing)
        self._assignment.assign(assigned, member_of(self._consumer))
        if self._ledger is not None:  # restored before its records are charged
            self._ledger.assigned(assigned)
        try:
            await self._seek_stable(assigned)
        finally:
            self._consumer.resume(*(assigned & self._consumer.assignment()))
        log.info("partitions assigned: %s", names(assigned))
        try:
            await asyncio.wait_for(
                warn_first_release(self._consumer, assigned, self._kafka.group_id),
                CHECK_TIMEOUT_S,
            )
        except (TimeoutError, KafkaError, OSError) as exc:  # a warning only: never block
            log.debug("could not check committed offsets: %s", type(exc).__name__)

    async def _seek_stable(self, assigned: set[TopicPartition]) -> None:
        """Start each new partition at its committed offset read with ``require_stable``.

        aiokafka's own reading can answer with the offset from before the
        previous owner's last commit, if its marker has not landed yet: this
        worker would then release that batch again (``stable_offsets``). If the
        broker cannot be asked that way, aiokafka's reading stands (a warning).
        """
        kafka = self._kafka
        if not assigned or not kafka.transactions:  # no transaction: nothing pending
            return
        admin = AIOKafkaAdminClient(**common_options(kafka, self._runtime))
        try:
            await admin.start()
            committed = await stable_committed(
                admin, kafka.group_id, sorted(assigned), within_s=open_transaction_wait_s(kafka)
            )
        except (TimeoutError, KafkaError, OSError, NotImplementedError) as exc:
            log.warning(
                "could not read the committed offsets of %s with require_stable (%s): a "
                "partition whose previous owner's last commit is still landing may start "
                "one batch early and release it again, byte for byte (with the ledger on, "
                "charged again too)",
                names(assigned),
                type(exc).__name__,
            )
            return
        finally:
            await admin.close()
        for tp, offset in committed.items():
            if offset is not None:
                self._consumer.seek(tp, offset)


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

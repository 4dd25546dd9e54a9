"""A transaction that begins while the previous one's markers are written asks again
every 2 ms, not every 20.

Kafka before KIP-890 (Kafka 4.0's transactions v2) answers
``CONCURRENT_TRANSACTIONS`` to a transaction's first ``AddPartitionsToTxn``
while its coordinator still writes the previous transaction's commit
markers, which it does after answering the commit. aiokafka then waits a
fixed 20 ms (``BACKOFF_OVERRIDE``, its answer to KAFKA-5477; the Java client
does the same). The markers of a local commit take a few milliseconds, and
the worker begins the next transaction as soon as the previous one has
committed, so that wait was paid by most transactions while the worker is
behind and by many while it keeps up: up to 20 ms more on every record of
the batch, for nothing (``bench/latency.py``; docs/benchmarks.md). The same
request is sent again sooner, nothing else changes: the coordinator decides
as before, and a transaction that already holds partitions keeps aiokafka's
``retry_backoff_ms``.
"""

from __future__ import annotations

from typing import Any

from privstream.kafka.compat import (
    BACKOFF_OVERRIDE,
    AddPartitionsToTxnHandler,
    CoordinationType,
    Sender,
)

#: the wait before asking again while the previous transaction's markers are written
RETRY_S = 0.002


class QuickStartSender(Sender):  # type: ignore[misc]
    """aiokafka's sender, the first ``AddPartitionsToTxn`` of a transaction retried sooner."""

    async def _do_add_partitions_to_txn(self, tps: Any) -> bool:
        txn = self._txn_manager
        node_id = await self._find_coordinator(CoordinationType.TRANSACTION, txn.transactional_id)
        done: bool = await QuickStartHandler(self, tps).do(node_id)
        return done


class QuickStartHandler(AddPartitionsToTxnHandler):  # type: ignore[misc]
    def handle_response(self, resp: Any) -> float | None:
        """aiokafka's handling; only its 20 ms wait for a transaction's first partitions
        (the previous transaction is completing) becomes ``RETRY_S``. Its other waits are
        ``retry_backoff_ms``, which the worker leaves at aiokafka's 100 ms."""
        backoff: float | None = super().handle_response(resp)
        return RETRY_S if backoff == BACKOFF_OVERRIDE else backoff

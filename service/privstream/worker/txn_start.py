"""A transaction that begins while the previous one's markers are written asks again
after 2 ms, then 4, 8, 16, not after 20 every time.

Kafka before KIP-890 (Kafka 4.0's transactions v2) answers
``CONCURRENT_TRANSACTIONS`` to a transaction's first ``AddPartitionsToTxn``
while its coordinator still writes the previous transaction's commit
markers, which it does after answering the commit. aiokafka then waits a
fixed 20 ms (``BACKOFF_OVERRIDE``, its answer to KAFKA-5477; the Java client
does the same). The markers of a local commit take a few milliseconds, and
the worker begins the next transaction as soon as the previous one has
committed while it is behind (and soon after while it keeps up), so that
wait could add up to 20 ms to every record of a batch for nothing
(docs/benchmarks.md, latency). The same request is sent again sooner,
doubling the wait up to aiokafka's 20 ms, so a coordinator slow to finish
gets about two requests more per transaction, not ten; nothing else
changes: the coordinator decides as before, and a transaction that already
holds partitions keeps aiokafka's ``retry_backoff_ms``.
"""

from __future__ import annotations

from typing import Any

from privstream.kafka.compat import (
    BACKOFF_OVERRIDE,
    AddPartitionsToTxnHandler,
    CoordinationType,
    Sender,
)

#: the first wait before asking again while the previous transaction's markers are written
RETRY_S = 0.002


class QuickStartSender(Sender):  # type: ignore[misc]
    """aiokafka's sender, the first ``AddPartitionsToTxn`` of a transaction retried sooner.

    Installed by swapping the class of a started producer's sender
    (``generation_fence.fence``), so its own state starts at the class default.
    """

    #: first ``AddPartitionsToTxn`` answers in a row that said the previous transaction
    #: was still completing
    refused_in_a_row = 0

    async def _do_add_partitions_to_txn(self, tps: Any) -> bool:
        txn = self._txn_manager
        node_id = await self._find_coordinator(CoordinationType.TRANSACTION, txn.transactional_id)
        done: bool = await QuickStartHandler(self, tps).do(node_id)
        return done


class QuickStartHandler(AddPartitionsToTxnHandler):  # type: ignore[misc]
    def handle_response(self, resp: Any) -> float | None:
        """aiokafka's handling; only its 20 ms wait for a transaction's first partitions
        (the previous transaction is completing) becomes ``RETRY_S``, doubled with each
        refusal in a row up to those 20 ms. aiokafka's other waits are
        ``retry_backoff_ms``, which the worker leaves at 100 ms."""
        backoff: float | None = super().handle_response(resp)
        sender: QuickStartSender = self._sender
        if backoff != BACKOFF_OVERRIDE:
            sender.refused_in_a_row = 0
            return backoff
        wait: float = min(RETRY_S * 2**sender.refused_in_a_row, BACKOFF_OVERRIDE)
        sender.refused_in_a_row += 1
        return wait

"""The subject ledger's two steps around a batch in the consume loop: its charge, made
while the previous batch commits, and its send, in its own transaction.

Both refuse what would release a batch the ledger did not charge under the
assignment it was fetched under (``assignment``).
"""

from __future__ import annotations

import numpy as np
from aiokafka import AIOKafkaProducer, ConsumerRecord, TopicPartition

from privstream.errors import LedgerError
from privstream.pipeline import BatchResult
from privstream.pipeline.results import DeadLetter
from privstream.worker.assignment import Assignment
from privstream.worker.ledger_store import LedgerStore, Verdict
from privstream.worker.produce import BatchSender
from privstream.worker.sanitize import Prepared


async def charge(
    ledger: LedgerStore,
    assignment: Assignment,
    owned: dict[TopicPartition, list[ConsumerRecord]],
    records: list[ConsumerRecord],
    result: BatchResult,
    generation: int,
) -> Verdict | None:
    """The ledger's charge of a sanitized batch, made while the previous one commits.

    ``records``: ``owned``'s lists end to end, fetched under ``generation``.
    On the event loop, right after checking that the assignment is still the
    batch's (no rebalance callback runs in between; one during the restore
    voids it: None, and the loop drops the batch). A batch charged but not
    committed leaves its charge only in memory forgotten with it: a failed
    transaction ends the session (the next restores every partition from the
    changelog), and the rebalance that voids a batch revokes its partitions
    first, forgetting their ledgers (aiokafka revokes all; a partial revoke
    would over-charge the rest, never under-).
    """
    if generation != assignment.generation:
        return None
    try:
        await ledger.ready({tp.partition for tp in owned})
    except LedgerError:  # revoked while restoring: voided (checked below)
        if generation == assignment.generation:
            raise
    if generation != assignment.generation:
        return None
    # the records are ``owned``'s lists end to end: their partitions are runs
    partitions = np.repeat([tp.partition for tp in owned], [len(m) for m in owned.values()])
    return ledger.charge(records, result, partitions)


async def send(
    ledger: LedgerStore, producer: AIOKafkaProducer, sender: BatchSender, batch: Prepared
) -> list[DeadLetter]:
    """Queue a charged batch's changelog records, then its messages."""
    if batch.verdict is None:  # never charged: releasing it would bypass every cap
        raise LedgerError(
            f"a batch of {len(batch.records)} records reached its transaction uncharged; "
            "refusing to release it (please report)"
        )
    return await ledger.send(producer, sender, batch.records, batch.verdict)

"""One poll of the input: a batch, topped up once when it is far from full; and whether
the worker is behind (``is_behind``: then it fetches the next batch while this one commits).

aiokafka fetches a partition again only once the records it buffered for it
have been taken. So the first poll after a transaction returns what the
fetch in flight brought (the first records that arrived while it committed)
and leaves the rest on the broker for one whole transaction more. A batch
far from full (under half of ``max_batch_records`` and of
``max_batch_bytes``) therefore takes one more short poll, which the broker
answers as soon as it holds records: at 10,000 records/s this halves how
long a record waits before it is fetched. A full batch (the worker is
behind) never waits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from privstream.config import KafkaConfig
from privstream.errors import UndecodableBatchError

if TYPE_CHECKING:
    from privstream.worker.sanitize import Prepared

Batches = dict[TopicPartition, list[ConsumerRecord]]
#: the most the second poll waits for a fetch in flight
TOP_UP_MS = 10


async def poll(
    consumer: AIOKafkaConsumer,
    kafka: KafkaConfig,
    generation: Callable[[], int],
    stopped: Callable[[UndecodableBatchError], None],
) -> tuple[Batches, int]:
    """The batch, and the assignment (``generation()``) it was fetched under; a partition
    stopped before a batch that cannot be decoded goes to ``stopped``.

    A rebalance during the second poll voids the first poll's records (the
    new assignment fetches them again from the committed offsets) but not the
    second's: aiokafka returns no record while a rebalance is in progress
    (``fetched_records`` waits for the assignment) and starts each partition
    of a new assignment at its committed offset, so records the second poll
    returns after a rebalance belong to the new assignment, and its position
    is already past them. Dropping them too would skip them: the next batch
    would commit an offset beyond records never released.
    """
    first = await _getmany(
        consumer, stopped, timeout_ms=kafka.poll_timeout_ms, max_records=kafka.max_batch_records
    )
    fetched_under = generation()
    room = _room(first, kafka)
    if not room:
        return first, fetched_under
    more = await _getmany(
        consumer, stopped, timeout_ms=min(TOP_UP_MS, kafka.poll_timeout_ms), max_records=room
    )
    if generation() != fetched_under:
        return more, generation()
    merged = {tp: list(msgs) for tp, msgs in first.items()}
    for tp, msgs in more.items():  # after the first poll's records of each partition
        merged.setdefault(tp, []).extend(msgs)
    return merged, fetched_under


async def _getmany(
    consumer: AIOKafkaConsumer,
    stopped: Callable[[UndecodableBatchError], None],
    **options: int,
) -> Batches:
    """``getmany``; empty when it raises ``UndecodableBatchError``, which it does only
    before taking any record (``privstream.kafka.decode``): nothing is lost."""
    try:
        batches: Batches = await consumer.getmany(**options)
    except UndecodableBatchError as exc:
        stopped(exc)
        return {}
    return batches


def _room(batches: Batches, kafka: KafkaConfig) -> int:
    """How many more records a batch far from full may take (0: it takes none)."""
    count = sum(map(len, batches.values()))
    if not count or 2 * count > kafka.max_batch_records:
        return 0
    size = sum(len(r.value or b"") for msgs in batches.values() for r in msgs)
    return 0 if 2 * size > kafka.max_batch_bytes else kafka.max_batch_records - count


def is_behind(
    consumer: AIOKafkaConsumer, batch: Prepared, kafka: KafkaConfig, generation: int
) -> bool:
    """A full batch, or records past it on the broker (as of the last fetch; the one
    offset past a transactional producer's last record is its commit marker). So is a
    batch a rebalance voided (``generation`` moved): its partitions may be gone, and
    ``highwater`` asserts that a partition is assigned."""
    if batch.generation != generation or len(batch.records) >= kafka.max_batch_records:
        return True
    return any((consumer.highwater(tp) or 0) > end + 1 for tp, end in batch.offsets.items())

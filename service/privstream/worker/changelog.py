"""The ledger's changelog topic: its name, and reading it back.

It is checked (and created when missing) with the other topics before a
session reads anything: ``privstream.worker.topics``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, TopicPartition

from privstream.config.ledger import CHANGELOG_SUFFIX
from privstream.errors import LedgerError
from privstream.ledger.core import RESTORE_BATCH

if TYPE_CHECKING:
    from privstream.config import AppConfig

log = logging.getLogger("privstream.worker")

#: how often a restore looks again at changelog partitions with a transaction still open
PENDING_RECHECK_S = 0.02
#: (partition, keys, values): takes a restore's next records
Fold = Callable[[int, list[bytes], list[bytes | None]], None]


def changelog_topic(config: AppConfig) -> str:
    ledger = config.privacy.ledger
    named = None if ledger is None else ledger.changelog_topic
    return named or f"{config.needs_kafka('run').input_topic}{CHANGELOG_SUFFIX}"


async def read_partitions(
    reader: AIOKafkaConsumer,
    highwater: AIOKafkaConsumer,
    topic: str,
    partitions: list[int],
    *,
    within_s: float,
    fold: Fold,
) -> None:
    """Pass every (key, value) of these changelog partitions to ``fold``, a fetched batch
    at a time (at most ``RESTORE_BATCH`` records), in offset order, up to their stable
    ends (``reader``: no group, ``read_committed``; ``highwater``: ``read_uncommitted``,
    asked for end offsets only; ``stable_ends``). Nothing is kept between batches: a
    restore's memory is its ledger's plus one batch."""
    tps = [TopicPartition(topic, p) for p in partitions]
    end = await stable_ends(reader, highwater, tps, within_s=within_s)
    reader.assign(tps)
    await reader.seek_to_beginning(*tps)
    try:
        behind = [tp for tp in tps if await reader.position(tp) < end[tp]]
        while behind:
            batches = await reader.getmany(*behind, timeout_ms=500, max_records=RESTORE_BATCH)
            for tp, msgs in batches.items():
                kept = [m for m in msgs if m.offset < end[tp]]
                fold(tp.partition, [m.key or b"" for m in kept], [m.value for m in kept])
            behind = [tp for tp in behind if await reader.position(tp) < end[tp]]
    finally:  # a changelog ``fold`` refused: the next restore starts from a clean reader
        reader.assign([])


async def stable_ends(
    reader: AIOKafkaConsumer,
    highwater: AIOKafkaConsumer,
    tps: list[TopicPartition],
    *,
    within_s: float,
) -> dict[TopicPartition, int]:
    """The partitions' end offsets once no transaction on them is still open.

    A transaction commits when its coordinator has logged the decision; the
    commit markers reach each partition it wrote afterwards, one by one. The
    previous owner's last batch wrote its charges here and its consumed
    offsets to the group; read up to the last stable offset while the marker
    is on its way here, a restore would miss those charges, while the group
    may already show the offsets committed (another partition, another
    marker): the new owner would go on without them, an under-charge. So the
    restore waits until the last stable offset (``reader``'s end) equals the
    high watermark (``highwater``'s end): every transaction that wrote here
    is then complete, committed or aborted, and its records are settled.
    The last stable offset is asked first: both only grow and LSO <= HW, so
    ``LSO(t1) == HW(t2)`` with ``t1 < t2`` means nothing was appended in
    between and the two were equal at ``t1``.

    A transaction that stays open (a producer that died mid-batch and never
    came back) is aborted by its coordinator after its timeout; past
    ``within_s`` this is a ``LedgerError``: charging from a ledger that may
    lack committed spending would reopen budgets.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    logged = False
    while True:
        stable = await reader.end_offsets(tps)
        ends = await highwater.end_offsets(tps)
        open_ = {tp: (stable[tp], ends[tp]) for tp in tps if stable[tp] < ends[tp]}
        if not open_:
            return {tp: int(stable[tp]) for tp in tps}
        where = ", ".join(f"{tp.topic}/{tp.partition} ({a} < {b})" for tp, (a, b) in open_.items())
        if loop.time() > deadline:
            raise _still_open(where, tps[0].topic, within_s)
        if not logged:
            log.info("ledger restore waits for open transactions on %s", where)
            logged = True
        await asyncio.sleep(PENDING_RECHECK_S)


def _still_open(where: str, topic: str, within_s: float) -> LedgerError:
    """The error once the wait is over, with the commands that end the transaction: on
    each partition it starts at that partition's last stable offset."""
    return LedgerError(
        f"ledger changelog partitions still hold an open transaction after {within_s:.0f} s "
        f"(last stable offset < high watermark: {where}); refusing to restore without its "
        "charges. A transaction open this long was begun with a longer "
        "transaction_timeout_ms (up to the broker's transaction.max.timeout.ms) or is "
        "hanging (KIP-664): list it with `kafka-transactions.sh --bootstrap-server <servers> "
        "find-hanging --broker-id <leader>`, abort it on each partition above with "
        f"`kafka-transactions.sh --bootstrap-server <servers> abort --topic {topic} "
        "--partition <partition> --start-offset <its last stable offset>`, then restart "
        "the worker"
    )

"""What the aggregate stream reads of the record path's ledger: how far its decisions are
committed, and the decisions (docs/proofs/ledger-aggregates.md, step 8).

The record path decides each contribution ``(s, a, w, W)`` and commits the decision row
(``codec``, ``A``) with its input offsets in one transaction. The aggregate stream never
decides: it adds a record of input partition ``p`` only once the record path's committed
offset on ``p`` is past it, and the record enters aggregate ``a``'s window ``w`` iff the
decision read back is "admitted". The order of the reads makes that sound: the record
path's committed offsets first (``stable_committed``: no commit pending), then the
changelog up to its stable end (``stable_ends``: every transaction that wrote there is
settled), so every decision of a record below those offsets is read. No decision (a
record the ledger's screen refused, or a row already expired) means left out, and so
does a record whose Kafka key is not its subject (the screen charges none).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from privstream.aggregates import AggregatePlan
from privstream.errors import MisuseError
from privstream.ledger import codec
from privstream.ledger.core import RESTORE_BATCH
from privstream.ledger.decisions import Decisions
from privstream.pipeline.subjects import subject_column
from privstream.worker.changelog import changelog_topic, stable_ends
from privstream.worker.clients import common_options, open_transaction_wait_s, stable_readers
from privstream.worker.stable_offsets import stable_committed

if TYPE_CHECKING:
    from aiokafka import ConsumerRecord

    from privstream.config import AppConfig, KafkaConfig
    from privstream.config.runtime import Runtime

#: (aggregate index, aggregate window start) -> whether the record enters that window
Admits = Callable[[int, int], bool]


class LedgerGate:
    """The record path's committed offsets and decisions on the partitions this aggregate
    worker owns, read forward as they grow."""

    def __init__(
        self,
        config: AppConfig,
        kafka: KafkaConfig,
        runtime: Runtime,
        plans: Sequence[AggregatePlan],
    ) -> None:
        ledger, subject = config.privacy.ledger, config.privacy.subject
        if ledger is None or subject is None:
            raise MisuseError("LedgerGate: the config has no privacy.ledger and subject")
        self._kafka, self._runtime = kafka, runtime
        self.topic = changelog_topic(config)
        self.window_ms = int(ledger.window)
        self.subject = subject
        self._ids = [plan.partial_id.encode("ascii") for plan in plans]
        self._clients: tuple[AIOKafkaAdminClient, AIOKafkaConsumer, AIOKafkaConsumer] | None
        self._clients = None
        self._decisions: dict[int, Decisions] = {}
        #: input partition -> the record path's committed offset (its decisions are read)
        self._until: dict[int, int] = {}
        #: input partition -> the changelog offset read up to
        self._read: dict[int, int] = {}

    async def start(self, stack: contextlib.AsyncExitStack) -> None:
        """The session's clients: an admin (committed offsets) and the changelog's readers
        (read_committed, and read_uncommitted for the high watermarks)."""
        admin = AIOKafkaAdminClient(**common_options(self._kafka, self._runtime))
        stack.push_async_callback(admin.close)
        await admin.start()
        self._clients = admin, *await stable_readers(self._kafka, self._runtime, stack)

    def reset(self) -> None:
        """Forget everything (a new assignment): read again from the changelog's start."""
        self._decisions.clear()
        self._until.clear()
        self._read.clear()

    def until(self, partition: int) -> int:
        """Records of ``partition`` below this offset have their decisions read."""
        return self._until.get(partition, 0)

    async def refresh(self, partitions: Sequence[int]) -> None:
        """Read the record path's committed offsets, then its changelog up to its stable
        end (in this order: module docstring)."""
        if self._clients is None:
            raise RuntimeError("LedgerGate.refresh before start")
        admin, reader, highwater = self._clients
        wait = open_transaction_wait_s(self._kafka)
        inputs = [TopicPartition(self._kafka.input_topic, p) for p in partitions]
        committed = await stable_committed(admin, self._kafka.group_id, inputs, within_s=wait)
        tps = [TopicPartition(self.topic, p) for p in partitions]
        ends = await stable_ends(reader, highwater, tps, within_s=wait)
        await self._read_to(reader, ends)
        for tp, offset in committed.items():
            self._until[tp.partition] = offset or 0

    async def _read_to(self, reader: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> None:
        behind = [tp for tp, end in ends.items() if self._read.get(tp.partition, 0) < end]
        if not behind:
            return
        reader.assign(behind)
        try:
            for tp in behind:
                reader.seek(tp, self._read.get(tp.partition, 0))
            while behind:
                batches = await reader.getmany(*behind, timeout_ms=500, max_records=RESTORE_BATCH)
                for tp, messages in batches.items():
                    self._fold(tp.partition, [m for m in messages if m.offset < ends[tp]])
                for tp in behind:
                    # not past the end: rows fetched beyond it (committed since it was
                    # taken) were not folded, the next refresh seeks back to read them
                    position = await reader.position(tp)
                    self._read[tp.partition] = min(position, ends[tp])
                behind = [tp for tp in behind if self._read[tp.partition] < ends[tp]]
        finally:
            reader.assign([])

    def _fold(self, partition: int, messages: list[ConsumerRecord]) -> None:
        decisions = self._decisions.setdefault(partition, Decisions())
        for message in messages:
            key = message.key or b""
            if codec.kind_of(key) == b"A":  # refuses a type this privstream cannot read
                decisions.fold(key, message.value)

    def admits(self, partition: int, messages: Sequence[ConsumerRecord]) -> list[Admits]:
        """Per message (decided: below ``until``), which aggregate windows it enters.

        Only a record whose Kafka key is its subject's canonical bytes: the ledger's screen
        charges no other (``subject_key_mismatch``, ``no_subject``), so a record keyed by
        one writer and naming another's subject would enter that subject's contribution
        uncharged. The key, not the field, says whose budget a record spends."""
        subjects = subject_column([m.value or b"" for m in messages], self.subject)
        decisions = self._decisions.get(partition, Decisions())
        return [
            self._admits(decisions, subject if m.key == subject else None, m.timestamp)
            for subject, m in zip(subjects, messages, strict=True)
        ]

    def _admits(self, decisions: Decisions, subject: bytes | None, timestamp_ms: int) -> Admits:
        ledger_start = timestamp_ms - timestamp_ms % self.window_ms
        window = (ledger_start, self.window_ms)

        def admits(index: int, start: int) -> bool:
            if subject is None:  # never charged (no subject, or a key not its subject)
                return False
            key = codec.decision_prefix(window, start, self._ids[index]) + subject
            return decisions.get(ledger_start, key) is True

        return admits

"""The subject ledger on Kafka: a compacted changelog, restored on assignment, charged per batch.

Kafka Streams' state-store pattern on Kafka itself (docs/ledger.md,
"Operating it"):

* The changelog topic (``privacy.ledger.changelog_topic``, default
  ``<input topic>-privstream-ledger``) is compacted and has the input's
  partition count: the ledger of input partition p is changelog partition
  p. ``topics.check_topics`` creates it at session start if missing, or
  stops the worker (``TopicError``) on one of another shape.
* Charges are made at this replica's time, checked against the broker's
  append time of the changelog records before the batch commits
  (``clock.BrokerClock``): a clock ahead by more than ``max_future``
  aborts the batch (``ClockAheadError``) and never moves the changelog's
  clock.
* On assignment, each partition's ledger is read back from its changelog
  partition (``read_committed``, from the beginning up to the end offset
  taken at assignment, once no transaction there is still open:
  ``changelog.stable_ends``), each fetched batch folded into the ledger as
  it arrives (``ledger.replay``: bounded memory), before any record of it
  is charged: ``ready`` waits for that. On revoke the partition is
  forgotten; a new session starts from an empty ledger, so a batch whose
  transaction failed after it was charged never leaves its charge behind
  in memory.
* Per batch, the records the pipeline released are charged, one
  ``SubjectLedger.charge`` per partition (offset order), as soon as the batch
  is sanitized (``charging.charge``: under the assignment it was fetched under
  only, while the previous batch commits). Admitted records
  go out with the per-subject guarantee header, and the last one of each
  partition in the batch with the partition's cumulative counts too (what
  ``estimate`` reads: the last counts per input partition); suppressed
  ones are dead-lettered with their reason, or dropped under
  ``over_budget: drop`` (never a record without a subject or whose key is
  not its subject: those are always dead-lettered).
  The changelog updates go out in the batch's transaction, with the outputs
  and the consumed offsets: a committed release and its charge are one
  atomic write.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from privstream.errors import LedgerError, TopicError
from privstream.kafka.compat import RecordMetadata
from privstream.ledger import LedgerPolicy, SubjectLedger
from privstream.ledger.groups import by_value
from privstream.ledger.updates import Updates
from privstream.pipeline import BatchResult
from privstream.pipeline.results import DeadLetter
from privstream.worker.aggregate_charges import aggregate_costs_of, aggregate_times
from privstream.worker.changelog import changelog_topic, read_partitions
from privstream.worker.clients import (
    batch_bytes,
    group_less_reader,
    open_transaction_wait_s,
)
from privstream.worker.clock import BrokerClock
from privstream.worker.ledger_columns import Columns, EventTime, misplaced
from privstream.worker.ledger_reasons import ALWAYS_DEAD_LETTERED, reason_details
from privstream.worker.produce import BatchSender, Headers
from privstream.worker.record_batch import changelog_batches

if TYPE_CHECKING:
    from privstream.config import AppConfig, KafkaConfig
    from privstream.config.runtime import Runtime
    from privstream.metrics import Metrics
    from privstream.pipeline import RecordPlan

log = logging.getLogger("privstream.worker")

GUARANTEE_HEADER = "privstream-subject-guarantee"
COUNTS_HEADER = "privstream-ledger-counts"


@dataclass
class Verdict:
    """A batch after the ledger: what to release, and what to write with it."""

    result: BatchResult
    #: record index -> headers added to its sanitized message (the counts, on the last
    #: released record of each partition in the batch)
    headers: dict[int, Headers] = field(default_factory=dict)
    #: input (= changelog) partition -> changelog records
    updates: dict[int, Updates] = field(default_factory=dict)
    #: records dropped over budget (neither released nor dead-lettered)
    dropped: int = 0
    #: suppressed records by reason (metrics, once the batch is committed)
    suppressed: Counter[str] = field(default_factory=Counter)
    #: the replica's time the batch was charged at (``BrokerClock.confirm``)
    charged_at_ms: int | None = None


class LedgerStore:
    """The ledger of the partitions this worker owns, kept in the changelog topic."""

    def __init__(
        self,
        *,
        ledger: SubjectLedger,
        topic: str,
        kafka: KafkaConfig,
        runtime: Runtime,
        metrics: Metrics,
        subject_field: str,
        clock: BrokerClock | None = None,
        event_time: EventTime | None = None,
    ) -> None:
        self.ledger = ledger
        self.policy: LedgerPolicy = ledger.policy
        #: the time charges are made at, checked against the broker's (``clock``)
        self.clock = clock or BrokerClock(bound_ms=self.policy.max_future_ms)
        self.topic = topic
        self._kafka = kafka
        self._runtime = runtime
        self._metrics = metrics
        #: the subject field (``privacy.subject``): ``sanitize`` reads its column for the charge
        self.subject_field = subject_field
        #: ``privacy.ledger.time``: windows follow the released time (None: Kafka timestamps)
        self.event_time = event_time
        time_field = None if event_time is None else event_time.field
        self._details = reason_details(self.policy, subject_field, time_field)
        self._restores: dict[int, asyncio.Task[None]] = {}
        #: partitions whose ledger is restored for the current assignment
        self._restored: set[int] = set()
        #: the changelog readers (read_committed, read_uncommitted), started on first use
        self._readers: tuple[AIOKafkaConsumer, AIOKafkaConsumer] | None = None
        self._reader_lock = asyncio.Lock()
        #: the input's partition count (from the changelog check)
        self._input_partitions: int | None = None

    @classmethod
    def from_config(
        cls,
        config: AppConfig,
        plan: RecordPlan,
        runtime: Runtime,
        metrics: Metrics,
        environ: Mapping[str, str] = os.environ,
    ) -> LedgerStore | None:
        """The store of ``privacy.ledger``; None without one (``environ``: the clock's
        fault-injection hook, ``clock.OFFSET_ENV``)."""
        subject = config.privacy.subject
        if config.privacy.ledger is None or subject is None:
            return None
        policy = LedgerPolicy.from_config(config, plan)
        time_field = config.privacy.ledger.time
        kafka = config.needs_kafka("run")
        costs = aggregate_costs_of(config)
        return cls(
            ledger=SubjectLedger(policy=policy, deployment=kafka.group_id, aggregates=costs),
            topic=changelog_topic(config),
            kafka=kafka,
            runtime=runtime,
            metrics=metrics,
            subject_field=subject,
            clock=BrokerClock.from_env(policy.max_future_ms, environ),
            event_time=None if time_field is None else EventTime.of(plan, time_field),
        )

    @property
    def output_headers(self) -> Headers:
        """Added to every sanitized message: the per-subject guarantee."""
        return [(GUARANTEE_HEADER, self.policy.guarantee_header())]

    async def open(self, input_partitions: int) -> None:
        """Session start, once the topics are checked (``topics.check_topics``, which gives
        the input's partition count): nothing in memory."""
        await self._forget_all()
        self._input_partitions = input_partitions

    async def close(self) -> None:
        await self._forget_all()
        readers, self._readers = self._readers or (), None
        for reader in readers:
            await reader.stop()

    def assigned(self, tps: Iterable[TopicPartition]) -> None:
        """Start restoring the assigned partitions (``ready`` waits for them)."""
        partitions = sorted(tp.partition for tp in tps)
        if not partitions:  # an idle replica (more replicas than partitions): nothing to read;
            # a restore of none would ask the reader to seek "all assigned" partitions and
            # fail, unawaited: an ERROR traceback at every rebalance
            log.info("no input partitions assigned: no ledger to restore")
            return
        task = asyncio.create_task(self._restore(partitions))
        for partition in partitions:
            self._restores[partition] = task

    async def revoked(self, tps: Iterable[TopicPartition]) -> None:
        """Forget the revoked partitions: their next owner restores them."""
        for tp in tps:
            await self._cancel(tp.partition)
            self._restored.discard(tp.partition)
            self.ledger.forget(tp.partition)
        self._set_gauge()

    async def ready(self, partitions: Iterable[int]) -> None:
        """Wait until these partitions are restored; a failed restore raises here.

        A partition that was never restored is a bug, and charging it from an
        empty ledger would reopen every subject's budget: LedgerError (so is one
        revoked meanwhile: the caller, which saw the revoke, voids its batch).
        """
        wanted = set(partitions)
        tasks = {self._restores[p] for p in wanted if p in self._restores}
        if tasks:  # not shield: a restore a revoke cancels must not cancel the caller
            await asyncio.wait(tasks)
        for task in tasks:
            if not task.cancelled() and (error := task.exception()) is not None:
                raise error
        missing = wanted - self._restored
        if missing:
            raise LedgerError(
                f"ledger of partitions {sorted(missing)} not restored before their records "
                "arrived; refusing to charge them from an empty ledger (please report)"
            )

    def charge(
        self,
        records: Sequence[ConsumerRecord],
        result: BatchResult,
        partitions: npt.NDArray[np.int64],
    ) -> Verdict:
        """Charge the records the pipeline released; suppress those over a cap.

        ``partitions``: each record's partition (the worker knows them as runs).
        """
        batch = Columns(records, result, partitions, self.subject_field, self.event_time)
        index, order = batch.index, batch.order
        admitted = np.ones(len(index), dtype=bool)
        verdict = Verdict(result=result)
        dead = list(result.dead_letters)
        now_ms = self.clock.now_ms()
        self.clock.check(now_ms)  # refuses a clock known to be ahead before it charges
        verdict.charged_at_ms = now_ms
        for partition, rows in by_value(batch.partitions):
            columns = batch.rows(rows)
            wrong = misplaced(partition, columns["keys"], self._input_partitions)
            times = aggregate_times(columns["timestamps_ms"], len(self.ledger.aggregates))
            charge = self.ledger.charge(
                partition, **columns, now_ms=now_ms, misplaced=wrong, aggregate_ms=times
            )
            admitted[rows] = charge.admitted
            verdict.updates[partition] = charge.updates
            if charge.admitted.any():
                last = int(index[rows[np.flatnonzero(charge.admitted)[-1]]])
                verdict.headers[last] = [(COUNTS_HEADER, self._counts(partition))]
            refused = np.flatnonzero(~charge.admitted).tolist()
            reasons = [str(charge.reasons[j]) for j in refused]
            verdict.suppressed.update(reasons)
            drop = self.policy.over_budget == "drop"
            for j, reason in zip(refused, reasons, strict=True):
                if drop and reason not in ALWAYS_DEAD_LETTERED:
                    verdict.dropped += 1
                else:
                    dead.append(DeadLetter(int(index[rows[j]]), reason, self._details[reason]))
        self._set_gauge()
        if admitted.all():
            return verdict  # the common case: everything released, nothing to rebuild
        # The clamped counts (metrics.clamped_counts) are charged to admitted records only,
        # and the batch's observations cannot be split by record: a batch with a suppressed
        # record feeds them nothing (the worker observes this very dict after the batch).
        result.observations.clear()
        dead.sort(key=lambda letter: letter.index)
        verdict.result = BatchResult(
            outputs=list(map(result.outputs.__getitem__, order[admitted].tolist())),
            output_index=index[admitted].tolist(),
            dead_letters=dead,
        )
        return verdict

    def committed(self, verdict: Verdict) -> None:
        """Count a committed batch's suppressions (a batch charged but never committed
        is charged again when it is fetched again: counted then)."""
        for reason, count in verdict.suppressed.items():
            self._metrics.ledger_suppressed.labels(reason).inc(count)

    async def send(
        self,
        producer: AIOKafkaProducer,
        sender: BatchSender,
        records: Sequence[ConsumerRecord],
        verdict: Verdict,
    ) -> list[DeadLetter]:
        """Queue a charged batch: its changelog records, then what it releases (the caller's
        transaction holds both)."""
        # the charges first: without transactions, a crash between the two then loses
        # budget (charged, not released) and never gains it (released, not charged)
        appended = await self.send_updates(producer, verdict)
        if verdict.charged_at_ms is not None and appended:
            self._confirm_clock(verdict.charged_at_ms, min(appended))
        return await sender.send(records, verdict.result, verdict.headers)

    def _confirm_clock(self, charged_ms: int, appended_ms: int) -> None:
        """The batch's charge time against the broker's append time, before it commits."""
        if appended_ms < 0:  # the broker kept our timestamps: no clock to compare with
            raise TopicError(
                f"ledger changelog {self.topic!r} no longer has "
                "message.timestamp.type=LogAppendTime (changed while the worker ran): "
                f"kafka-configs.sh --bootstrap-server <servers> --alter --entity-type topics "
                f"--entity-name {self.topic} --add-config message.timestamp.type=LogAppendTime"
            )
        try:
            self.clock.confirm(charged_ms, appended_ms)
        finally:
            self._metrics.clock_ahead.set((charged_ms - appended_ms) / 1000)

    def _counts(self, partition: int) -> bytes:
        """The partition's cumulative counts, naming the input partition (several may
        share an output partition)."""
        counts = {**self.ledger.counts(partition), "partition": partition}
        return json.dumps(counts, sort_keys=True, separators=(",", ":")).encode()

    async def send_updates(self, producer: AIOKafkaProducer, verdict: Verdict) -> list[int]:
        """Queue the changelog records (record batches built whole, ``record_batch``) and
        await them; the broker's timestamp of each batch (-1: the producer's kept)."""
        max_bytes, transactional = batch_bytes(self._kafka), self._kafka.transactions
        pending: list[asyncio.Future[RecordMetadata | None]] = [
            await producer.send_batch(batch, self.topic, partition=partition)
            for partition, updates in sorted(verdict.updates.items())
            for batch in changelog_batches(
                updates.runs, max_bytes=max_bytes, transactional=transactional
            )
        ]
        acked = await asyncio.gather(*pending)  # None: not acknowledged (acks=0, never ours)
        return [int(meta.timestamp) for meta in acked if meta is not None]

    async def _forget_all(self) -> None:
        """Nothing in memory: what a failed batch charged is forgotten with the rest."""
        for partition in {*self._restores, *self._restored}:
            await self.revoked([TopicPartition(self._kafka.input_topic, partition)])

    def _set_gauge(self) -> None:
        self._metrics.ledger_subjects.set(self.ledger.active_subject_windows())

    async def _cancel(self, partition: int) -> None:
        task = self._restores.pop(partition, None)
        if task is not None and task not in self._restores.values():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _restore(self, partitions: list[int]) -> None:
        """Replay each changelog partition up to its end offset at this moment, folding
        each fetched batch into the partition's ledger as it arrives (bounded memory)."""
        started = time.perf_counter()
        replays = {partition: self.ledger.replay(partition) for partition in partitions}
        async with self._reader_lock:
            reader, highwater = self._readers or await self._start_readers()
            await read_partitions(
                reader,
                highwater,
                self.topic,
                partitions,
                within_s=open_transaction_wait_s(self._kafka),
                fold=lambda partition, keys, values: replays[partition].add(keys, values),
            )
        me = asyncio.current_task()
        for partition in partitions:
            if self._restores.get(partition) is me:  # not revoked meanwhile
                self.ledger.restored(replays[partition])
                self._restored.add(partition)
                self._warn_if_ahead(partition)
        self._set_gauge()
        log.info(
            "ledger restored for partitions %s from %s: %d changelog records in %.2f s",
            partitions,
            self.topic,
            sum(replay.records for replay in replays.values()),
            time.perf_counter() - started,
        )

    def _warn_if_ahead(self, partition: int) -> None:
        """A changelog clock already ahead of this replica's by more than ``max_future``:
        written by a replica with a fast clock before the clock checks (or without
        transactions). It cannot be moved back safely (docs/ledger.md, Clock sanity)."""
        clock = self.ledger.clock(partition)
        now = self.clock.now_ms()
        if clock is not None and clock - now > self.policy.max_future_ms:
            log.warning(
                "ledger changelog %s partition %d: its clock is %.0f s ahead of this "
                "replica's, so windows this replica takes for open are closed there "
                "(late_record) until its clock catches up (docs/ledger.md, Clock sanity)",
                self.topic,
                partition,
                (clock - now) / 1000,
            )

    async def _start_readers(self) -> tuple[AIOKafkaConsumer, AIOKafkaConsumer]:
        """The changelog reader: no group, read_committed (a partition's ledger is what
        committed transactions wrote, never what an aborted batch charged); and a
        read_uncommitted one whose end offsets are the high watermarks
        (``changelog.stable_ends``)."""
        readers = tuple(
            group_less_reader(self._kafka, self._runtime, isolation)
            for isolation in ("read_committed", "read_uncommitted")
        )
        for reader in readers:
            await reader.start()
        self._readers = readers[0], readers[1]
        return self._readers

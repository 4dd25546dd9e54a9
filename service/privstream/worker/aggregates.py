"""``privstream run``'s aggregates: windows closed and released exactly once over Kafka.

Beside the record worker, in the same process, with its own consumer group
(``<group_id>.aggregates``) and transactional id (``<prefix>-<replica>-aggregates``),
so its input offsets move only when windows close, never held back by or
holding back the record path. Each step:

1. fetch a batch and add it to the open windows (``OpenWindows``), leaving
   out the records misplaced for their subject (``misplaced_records``);
2. close the windows the wall clock passed (end + grace) on each owned
   partition read up to its end at the session's start: their partials and
   progress go to the internal topic in ONE transaction with the input
   offsets up to the oldest open window's first record;
3. the owner of input partition 0 (the releaser) merges the partials of
   every partition of each due window, noises it once with keyed noise and
   writes its rows to the aggregate's topic in ONE transaction with the
   window's ``released`` marker and its partials' tombstones (its offset
   commit of partition 0 fences a releaser that lost the partition).

A session starts (and every rebalance restarts) from the committed state:
the internal topic read up to its stable end (``changelog.read_partitions``;
refused if another deployment's marker is there: ``refuse_shared``, or an
aggregate's name was counted under another time source: ``refuse_other_time``,
by ``OpenWindows``) and the input from the committed offsets. Proof:
docs/proofs/aggregates.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import orjson
from aiokafka import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRebalanceListener,
    ConsumerRecord,
    TopicPartition,
)
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import MessageSizeTooLargeError, RecordTooLargeError

from privstream.aggregates import AggregatePlan, KeyedCells, build_aggregates
from privstream.aggregates.deployments import (
    count_writes,
    marker_writes,
    refuse_other_count,
    refuse_recreated_input,
    refuse_shared,
)
from privstream.aggregates.stream import OpenWindows, Release, releases
from privstream.aggregates.windows import View, Write, epoch_record
from privstream.config import AppConfig, KafkaConfig
from privstream.config.runtime import Runtime
from privstream.metrics import Metrics
from privstream.worker.aggregate_input import misplaced_records
from privstream.worker.aggregate_ledger import LedgerGate
from privstream.worker.changelog import read_partitions
from privstream.worker.clients import (
    CLOSE_TIMEOUT_S,
    StableReaders,
    close_client,
    common_options,
    consumer_options,
    open_transaction_wait_s,
    producer_options,
    stable_readers,
    transactional_id,
)
from privstream.worker.generation_fence import GroupId, fence, member_of
from privstream.worker.loop import RETRIABLE
from privstream.worker.restart import Backoff, describe
from privstream.worker.stable_offsets import stable_committed
from privstream.worker.topics import check_aggregate_topics

log = logging.getLogger("privstream.aggregates")
#: the internal topic's readers: read_committed, read_uncommitted

#: a releaser that does not own every input partition reads the others' progress this often
REFRESH_S = 2.0
#: with a ledger, a step that fetched only records the record path has not committed yet
#: waits this long before it asks again (pacing, not synchronisation: ``LedgerGate``)
GATE_PACE_S = 0.1
_Batches = dict[TopicPartition, list[ConsumerRecord]]


def aggregates_topic(input_topic: str) -> str:
    return f"{input_topic}-privstream-aggregates"


class _Moved(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    def __init__(self) -> None:
        self.moved = True

    async def on_partitions_revoked(self, revoked: object) -> None:
        self.moved = True

    async def on_partitions_assigned(self, assigned: object) -> None:
        self.moved = True


class AggregateWorker:
    """Runs the config's aggregates over the input topic until ``stop``."""

    def __init__(
        self, config: AppConfig, kafka: KafkaConfig, runtime: Runtime, metrics: Metrics
    ) -> None:
        self.kafka = kafka
        self._runtime = runtime
        self.metrics = metrics
        self.plans: tuple[AggregatePlan, ...] = build_aggregates(config)
        self.noise = KeyedCells(runtime.noise_secret, kafka.input_topic, kafka.noise_domain)
        self.topic = aggregates_topic(kafka.input_topic)
        self.group = f"{kafka.group_id}.aggregates"
        self.subject = config.privacy.subject
        #: with a ledger: its committed decisions, which say what enters each window
        self.gate = (
            None
            if config.privacy.ledger is None
            else LedgerGate(config, kafka, runtime, self.plans)
        )
        self._backoff = Backoff()
        #: output topic -> its partition count (``check_aggregate_topics``)
        self.outputs: dict[str, int] = {}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._session(stop)
            except RETRIABLE as exc:
                delay = self._backoff.next_delay()
                log.warning("aggregates session ended (%s); again in %.1f s", _said(exc), delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)

    async def _session(self, stop: asyncio.Event) -> None:
        outputs = sorted({p.spec.output_topic or "" for p in self.plans})
        partitions, self.outputs = await check_aggregate_topics(
            self.kafka, self._runtime.credentials, self.topic, outputs
        )
        async with contextlib.AsyncExitStack() as stack:
            options = producer_options(self.kafka, self._runtime)
            options["transactional_id"] = (
                f"{transactional_id(self.kafka, self._runtime)}-aggregates"
            )
            producer = AIOKafkaProducer(**options)
            fence(producer)
            stack.push_async_callback(close_client, producer)
            await producer.start()  # aborts a killed predecessor's open transaction
            consumer = AIOKafkaConsumer(
                **{**consumer_options(self.kafka, self._runtime), "group_id": self.group}
            )
            stack.push_async_callback(close_client, consumer)
            moved = _Moved()
            consumer.subscribe([self.kafka.input_topic], listener=moved)
            await consumer.start()
            readers = await self.readers(stack)
            if self.gate is not None:
                await self.gate.start(stack)
            step = _Step(self, consumer, producer, readers, partitions, moved)
            while not stop.is_set():
                if moved.moved:
                    moved.moved = False
                    await step.restart()
                    continue
                await step.run()
                self._backoff.reset()

    async def readers(self, stack: contextlib.AsyncExitStack) -> StableReaders:
        """The internal topic's readers, kept for the session."""
        return await stable_readers(self.kafka, self._runtime, stack)

    async def committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed input offsets once none is pending (``stable_committed``),
        read BEFORE the internal topic: aiokafka's reading may predate the previous owner's
        last close, whose records the view may then miss too, and the open windows' records
        would be counted again (red team 14a, finding 4). A failure ends the session
        (retried): never aiokafka's reading instead."""
        if not tps:
            return {}
        admin = AIOKafkaAdminClient(**common_options(self.kafka, self._runtime))
        try:
            await admin.start()
            wait = open_transaction_wait_s(self.kafka)
            return await stable_committed(admin, self.group, tps, within_s=wait)
        finally:
            await admin.close()

    async def read_view(self, readers: StableReaders) -> View:
        """The internal topic up to its stable end; ChangelogError if another deployment
        (``kafka.group_id``) uses it."""
        view = View()
        await read_partitions(
            *readers,
            self.topic,
            [0],
            within_s=open_transaction_wait_s(self.kafka),
            fold=lambda _p, keys, values: view.fold(keys, values),
        )
        refuse_shared(view, self.kafka.group_id, self.topic)
        if not view.progress:  # a new state: were windows released before it?
            tps = [TopicPartition(t, p) for t, n in self.outputs.items() for p in range(n)]
            ends = await readers[1].end_offsets(tps) if tps else {}
            view.released_elsewhere = any(end > 0 for end in ends.values())
        return view


class _Step:
    """One session's state: the view, the open windows and the group member."""

    def __init__(
        self,
        owner: AggregateWorker,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
        readers: StableReaders,
        partitions: int,
        moved: _Moved,
    ) -> None:
        self._readers = readers
        self._moved = moved
        self._member = member_of(consumer)
        self._owner = owner
        self._consumer = consumer
        self._producer = producer
        self._partitions = partitions
        self._view = View()
        self._windows = OpenWindows(owner.plans, self._view)
        self._pending: list[Write] = []
        self._refreshed = 0.0
        #: each partition's end when the session started: no window closes on it before
        #: its records up to there (the open windows' replay) are read again
        self._replay: dict[TopicPartition, int] = {}

    async def restart(self) -> None:
        """After an assignment: the committed state, the input from its committed offsets.

        Every transaction until the next one commits as this generation's member: after
        another rebalance the broker refuses its offsets, and the session starts again.
        """
        consumer = self._consumer
        self._member = member_of(consumer)
        committed = await self._owner.committed(sorted(consumer.assignment()))
        for tp, offset in committed.items():
            if offset is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, offset)
        self._replay = await consumer.end_offsets(list(consumer.assignment()))
        if self._owner.gate is not None:
            self._owner.gate.reset()
        self._view = await self._owner.read_view(self._readers)
        log.debug("restored the aggregates' state: epoch %s", self._view.epoch_ms)
        self._check_partitions()
        ends = await consumer.end_offsets(list(consumer.assignment()))  # after the view
        owner = self._owner
        by_partition = {tp.partition: end for tp, end in ends.items()}
        refuse_recreated_input(self._view, by_partition, owner.kafka.input_topic, owner.group)
        self._pending = marker_writes(self._view, self._owner.kafka.group_id)
        self._pending += count_writes(self._view, self._partitions)
        if self._view.epoch_ms is None:  # the first transaction ever writes it
            now = _now_ms()
            self._view.epoch_ms = now
            self._pending.append(epoch_record(now))
        self._windows = OpenWindows(self._owner.plans, self._view)
        for name in self._windows.changed:  # the configs' change alone, never a count
            log.warning(
                "aggregate %s: its plan (bounds, epsilon, grid or window) changed since its "
                "partials were committed; the windows still open are released without the "
                "records counted under the old plan",
                name,
            )
        self._refreshed = time.monotonic()

    def _check_partitions(self) -> None:
        """ChangelogError if the input's partition count is not the one committed, nor the
        one this session started with (the input grew: a rebalance brought it here)."""
        topic = self._owner.kafka.input_topic
        current = len(self._consumer.partitions_for_topic(topic) or ()) or self._partitions
        refuse_other_count(self._view, self._partitions, self._owner.topic)
        if current != self._partitions:
            self._view.partitions = self._partitions
            refuse_other_count(self._view, current, self._owner.topic)

    async def run(self) -> None:
        batches = await self._consumer.getmany(timeout_ms=500, max_records=5000)
        if self._moved.moved:  # fetched across a rebalance: read again from the commits
            return
        gate = self._owner.gate
        if gate is not None:
            batches = await self._decided(gate, batches)
            if self._moved.moved:
                return
        now, subject = _now_ms(), self._owner.subject
        self._windows.begin(now)  # the new names' first windows, before any record is read
        for tp, messages in batches.items():
            wrong = misplaced_records(messages, tp.partition, self._partitions, subject)
            admits = [None] * len(messages) if gate is None else gate.admits(tp.partition, messages)
            for m, misplaced, admit in zip(messages, wrong, admits, strict=True):
                self._windows.add(
                    tp.partition,
                    m.offset,
                    m.timestamp,
                    m.value,
                    now,
                    misplaced=misplaced,
                    admits=admit,
                )
        await self._close()
        if self._moved.moved:  # the marker just committed: read the topic again first
            return
        await self._release()

    async def _decided(self, gate: LedgerGate, batches: _Batches) -> _Batches:
        """The fetched records whose ledger decisions are committed (and read); the
        consumer is moved back to the first of the others, read again once they are."""
        if any(m and m[-1].offset >= gate.until(tp.partition) for tp, m in batches.items()):
            await gate.refresh(sorted(tp.partition for tp in self._consumer.assignment()))
        decided: _Batches = {}
        for tp, messages in batches.items():
            until = gate.until(tp.partition)
            kept = [m for m in messages if m.offset < until]
            if len(kept) < len(messages):
                self._consumer.seek(tp, messages[len(kept)].offset)
            decided[tp] = kept
        if batches and not any(decided.values()):  # the record path is behind: let it work
            await asyncio.sleep(GATE_PACE_S)
        return decided

    async def _close(self) -> None:
        consumer, now = self._consumer, _now_ms()
        writes = list(self._pending)
        # a new marker or epoch record: read the topic again after it commits (a replica
        # that started beside this one and wrote its own is then refused, or followed)
        marked = self._owner.kafka.group_id not in self._view.deployments or self._windows.starting
        offsets: dict[TopicPartition, int] = {}
        for tp in sorted(consumer.assignment()):
            position = await consumer.position(tp)
            if position >= self._replay.get(tp, 0):  # the open windows read again
                writes += self._windows.close(tp.partition, now)
            offsets[tp] = self._windows.held(tp.partition, position)
        if writes and offsets:  # a worker without partitions leaves the epoch to another
            await self._transaction(writes, [], offsets)
            if marked:
                self._moved.moved = True

    async def _release(self) -> None:
        input0 = TopicPartition(self._owner.kafka.input_topic, 0)
        assigned = self._consumer.assignment()
        if input0 not in assigned:
            return
        stale = time.monotonic() - self._refreshed > REFRESH_S
        if len(assigned) < self._partitions and stale and not self._pending:
            self._view = await self._owner.read_view(self._readers)  # the other workers' progress
            self._windows.rebase(self._view)
            self._refreshed = time.monotonic()
        due = releases(self._owner.plans, self._view, self._owner.noise, self._partitions)
        if not due:
            return
        position = await self._consumer.position(input0)
        offsets = {input0: self._windows.held(0, position)}
        await self._transaction([w for r in due for w in r.writes], due, offsets)
        for done in due:
            self._owner.metrics.observe_window(done.plan.name, done.end_ms, done.rows)
            log.info("released %s window %s", done.plan.name, done.label)

    async def _transaction(
        self, writes: list[Write], due: list[Release], offsets: dict[TopicPartition, int]
    ) -> None:
        """The writes, the rows and the offsets, committed together or not at all."""
        producer = self._producer
        group = GroupId(self._owner.group, self._member)
        await producer.begin_transaction()
        try:
            for done in due:
                topic = done.plan.spec.output_topic or ""
                for row in done.rows:
                    names = {
                        "aggregate": row["aggregate"],
                        "window": row["window"],
                        "group": row["group"],
                    }
                    await producer.send(topic, _json(row), key=_json(names))
            for key, value in writes:
                await producer.send(self._owner.topic, value, key=key, partition=0)
            await producer.send_offsets_to_transaction(offsets, group)
            await producer.commit_transaction()
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.abort_transaction(), CLOSE_TIMEOUT_S)
            raise
        self._pending = []
        for key, value in writes:  # committed: the view follows the topic
            self._view.apply(key, value)
        self._owner.metrics.transactions.labels("committed").inc()


def _said(exc: BaseException) -> str:
    """What the log says of a failed session: a record-size error by its name alone (its
    text holds the record's size, which grows with the distinct groups the records hold:
    a count in a log line; red team 14a, finding 5)."""
    if isinstance(exc, MessageSizeTooLargeError | RecordTooLargeError):
        return (
            f"{type(exc).__name__}: a record of the transaction (a released row or an "
            "internal record) passed kafka.max_message_bytes"
        )
    return describe(exc)


def _json(value: object) -> bytes:
    return orjson.dumps(value)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000

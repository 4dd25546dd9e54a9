"""The consume -> sanitize -> produce loop: a thin shell around ``process_batch``.

Delivery: exactly once. Each polled batch becomes one Kafka transaction that
holds its sanitized messages, its dead letters and the consumed offsets
(aiokafka's transactional producer, ``send_offsets_to_transaction``), so a
reader with ``isolation_level=read_committed`` sees every raw record's release
once or not at all. Batches overlap by one step: the next batch is fetched and
sanitized (in a thread: ``sanitize`` is pure), and charged to the subject
ledger if there is one, while the previous one's
transaction runs; its own transaction begins only once that one has committed,
so the producer never has two open. A failed transaction ends the session, and
the batch sanitized meanwhile is dropped unreleased (the next session fetches
it again from the committed offsets). Each record's noise is keyed on (secret,
topic, partition, offset, raw bytes, field release): a batch replayed after a
crash or an aborted transaction is released with the very same bytes, so even
an aborted copy that a ``read_uncommitted`` reader saw gives no second draw.

Fencing: each transaction's offsets are committed as the group member and
generation its partitions were assigned under (KIP-447, ``generation_fence``):
a worker that stalled past the session timeout and lost them has its commit
refused and its batch aborted, outputs and ledger records included. A
rebalance waits for the batch in flight to commit before the partitions move
(``Rebalance``), and the transactional id, stable per replica, lets a
restarted replica abort its predecessor's open transaction at once.

Faults: aiokafka retries a dropped connection or a slow request inside the
session. An error it gives up on ends the session (the open transaction is
aborted, both clients are closed) and a new one starts after an exponential
backoff, from the committed offsets. So does a fencing after an outage: the
broker aborted a transaction older than ``transaction_timeout_ms`` and
bumped the epoch (``clients.Fencing``, judged by ``fencing_judge``, tells that
from a second worker).
Errors a human must fix (``clients.final_error``, a missing or
misconfigured topic: ``topics``) stop the worker with a message. A replica
whose clock is ahead of the broker's (``clock``) ends its session with the
batch aborted, is not ready, and retries with backoff until its clock is
fixed. A record batch that cannot be decoded stops only its partition,
reported and retried, never skipped (``stalls``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from itertools import chain

from aiokafka import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRecord,
    TopicPartition,
)
from aiokafka.errors import KafkaConnectionError, KafkaError

from privstream.config import KafkaConfig
from privstream.config.runtime import Runtime
from privstream.errors import (
    ClockAheadError,
    LedgerError,
    SchemaRegistryUnavailableError,
    UndecodableBatchError,
)
from privstream.kafka.decode import tolerate_undecodable_records
from privstream.metrics import Metrics
from privstream.pipeline import BatchResult, RecordPlan
from privstream.pipeline.results import DeadLetter
from privstream.worker import charging
from privstream.worker.assignment import Assignment
from privstream.worker.client_logs import Reachability, lost_broker
from privstream.worker.clients import (
    CLOSE_TIMEOUT_S,
    batch_bytes,
    broker_answers,
    close_client,
    consumer_options,
    diagnose,
    final_error,
    producer_options,
    transactional_id,
)
from privstream.worker.fencing_judge import FencingJudge
from privstream.worker.fetch import is_behind, poll
from privstream.worker.generation_fence import (
    GroupId,
    fence,
    is_stale_member,
    member_of,
)
from privstream.worker.http import Health
from privstream.worker.ledger_store import LedgerStore
from privstream.worker.output_schema import Encoder, OutputSchema
from privstream.worker.produce import BatchSender
from privstream.worker.rebalance import Rebalance, names
from privstream.worker.restart import Backoff, describe, unless_failed
from privstream.worker.sanitize import Prepared, Sanitize, Sanitizer
from privstream.worker.stalls import Stalls
from privstream.worker.topics import check_topics

log = logging.getLogger("privstream.worker")

Batches = dict[TopicPartition, list[ConsumerRecord]]
#: errors after which a new session may succeed (the broker may come back; a changelog
#: batch garbled in transit may decode; the schema registry may answer again)
RETRIABLE = (
    KafkaError,
    OSError,
    TimeoutError,
    UndecodableBatchError,
    SchemaRegistryUnavailableError,
)
#: readiness probe: a one-topic metadata request per period, unanswered after the timeout
PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 2.0


class Worker:
    """Owns the Kafka clients; everything else is delegated.

    ``sanitizer`` and ``judge`` default to the real ones (``Sanitizer.for_input``,
    a ``FencingJudge`` on ``time.monotonic``); tests pass their own.
    """

    def __init__(
        self,
        kafka: KafkaConfig,
        plan: RecordPlan,
        runtime: Runtime,
        *,
        metrics: Metrics,
        health: Health,
        ledger: LedgerStore | None = None,
        sanitizer: Sanitize | None = None,
        judge: FencingJudge | None = None,
        output: OutputSchema | None = None,
    ) -> None:
        self._kafka = kafka
        self._ledger = ledger
        self._plan = plan
        self._runtime = runtime
        self._metrics = metrics
        self._health = health
        subject = None if ledger is None else ledger.subject_field
        if sanitizer is None:
            sanitizer = Sanitizer.for_input(kafka, plan, runtime, subject)
        self._sanitize = sanitizer
        #: the partitions owned now, shared with the rebalance listener
        self.assignment = Assignment()
        #: Avro or Protobuf output: its schema, and once registered its encoder (None: JSON)
        self._output = output
        self._encoder: Encoder | None = None
        self._backoff = Backoff()
        tolerate_undecodable_records()
        #: partitions stopped before a batch that cannot be decoded: not ready while any is
        self._stalls = Stalls(metrics)
        self._connected = False
        #: what a fencing is judged by (``clients.Fencing``)
        self._judge = FencingJudge(kafka.transaction_timeout_ms / 1000) if judge is None else judge
        self._reach = Reachability(log)  # the WARNINGs about the broker's comings and goings

    async def run(self, stop: asyncio.Event) -> None:
        """Process batches until ``stop`` is set, reconnecting after broker trouble.

        Raises ``BrokerError`` when the broker refuses the worker for good.
        """
        log.info(
            "consuming %s as group %s, %s",
            self._kafka.input_topic,
            self._kafka.group_id,
            f"transactional id {transactional_id(self._kafka, self._runtime)}"
            if self._kafka.transactions
            else "transactions off (at-least-once, replays byte-identical)",
        )
        while not stop.is_set():
            try:
                await self._session(stop)
            except (ClockAheadError, *RETRIABLE) as exc:
                delay = await self.recover(exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)

    async def recover(self, exc: Exception) -> float:
        """After a session ended with ``exc`` (a ``ClockAheadError`` or ``RETRIABLE``): the
        seconds to wait before the next, logged; raises the error a human must fix instead."""
        if isinstance(exc, ClockAheadError):
            return self._clock_refused(exc)
        fencing = self._judge.judge(exc)
        final = final_error(exc, self._kafka, self._runtime, fencing)
        if final is None and isinstance(exc, KafkaConnectionError):
            final = await diagnose(self._kafka, self._runtime)
        if final is not None:
            raise final from None
        delay = self._backoff.next_delay()
        if fencing is not None and fencing.expired:
            self._metrics.transactions_expired.inc()
        if isinstance(exc, UndecodableBatchError):  # a changelog batch: no restore
            self._stalls.report(exc, f"restoring again in {delay:.1f} s")
            self._set_connected(self._connected)  # the broker answered: not ready
        elif fencing is None:
            self._set_connected(False)
            ended = f"Kafka session ended ({describe(exc)}); reconnecting in {delay:.1f} s"
            if lost_broker(exc):
                self._reach.unreachable(ended)
            else:  # the broker answered (refused): no outage to report, nor its end
                log.warning("%s", ended)
        else:
            self._set_connected(False)
            why = fencing.explain(self._kafka, self._runtime)
            log.warning("%s; reconnecting in %.1f s", why, delay)
        return delay

    def _clock_refused(self, exc: ClockAheadError) -> float:
        """Nothing was charged: retried with backoff until the clock is fixed."""
        self._metrics.clock_refusals.inc()
        self._set_connected(False)
        delay = self._backoff.next_delay()
        log.warning("%s; retrying in %.1f s", exc, delay)
        return delay

    async def _session(self, stop: asyncio.Event) -> None:
        """One pair of clients, from start to ``stop`` or the first broker error.

        The topics are checked first (``topics``: a ``TopicError`` stops the worker),
        before any client could read or write one.
        """
        self._judge.session_started()
        if self._output is not None and self._encoder is None:  # before any record is read
            self._encoder = await asyncio.to_thread(self._output.register)
        changelog = None if self._ledger is None else self._ledger.topic
        partitions = await check_topics(self._kafka, self._runtime.credentials, changelog)
        async with contextlib.AsyncExitStack() as stack:
            producer = AIOKafkaProducer(**producer_options(self._kafka, self._runtime))
            if self._kafka.transactions:
                fence(producer)
            stack.push_async_callback(close_client, producer)
            await producer.start()
            self._judge.producer_started(producer.client)
            if self._ledger is not None:  # a new session restores the ledger from the changelog
                stack.push_async_callback(self._ledger.close)
                await self._ledger.open(partitions)
            consumer = AIOKafkaConsumer(**consumer_options(self._kafka, self._runtime))
            stack.push_async_callback(close_client, consumer)
            consumer.subscribe([self._kafka.input_topic], listener=self.listener(consumer))
            await consumer.start()
            member_of(consumer)  # an aiokafka that hides the generation stops us here
            probe = asyncio.create_task(self.probe(producer))
            stack.callback(probe.cancel)
            plain = BatchSender(
                producer,
                self._plan,
                self._kafka.output_topic,
                self._kafka.dead_letter_topic,
                max_message_bytes=self._kafka.max_message_bytes,
                batch_bytes=batch_bytes(self._kafka),
                transactional=self._kafka.transactions,
                extra_headers=self._ledger.output_headers if self._ledger else (),
            )
            await self.pipeline(stop, consumer, producer, plain)

    async def pipeline(
        self,
        stop: asyncio.Event,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
        sender: BatchSender,
    ) -> None:
        """A session's work on its started clients, ready from the start: fetch and
        sanitize the next batch while the previous one's transaction runs.

        Only while behind, though: once a batch took everything the broker had, the
        next fetch waits for its transaction, so what arrives meanwhile goes out in
        the next transaction rather than waiting one more in a prefetched batch.
        """
        self._reach.reachable()
        self._set_connected(True)
        inflight: asyncio.Task[None] | None = None
        behind = True
        try:
            while not stop.is_set():
                if inflight is not None and not behind:
                    await inflight  # caught up: fetch once it has committed
                    inflight = None
                    continue  # ``stop`` may have come meanwhile
                prepared = await unless_failed(self._prepare(consumer), inflight)
                if inflight is not None and (prepared is not None or inflight.done()):
                    await inflight  # its failure ends the session; ``prepared`` is replayed
                    inflight = None
                if prepared is not None:
                    behind = is_behind(consumer, prepared, self._kafka, self.assignment.generation)
                    commit = self._commit(consumer, producer, sender, prepared)
                    inflight = asyncio.create_task(commit)
            if inflight is not None:
                await inflight
        finally:
            if inflight is not None:  # cancelled or failed: settle it before the clients close
                inflight.cancel()
                await asyncio.gather(inflight, return_exceptions=True)

    async def _prepare(self, consumer: AIOKafkaConsumer) -> Prepared | None:
        """The next batch, sanitized in a thread (the previous transaction runs meanwhile)."""
        polled = time.perf_counter()
        batches, generation = await poll(
            consumer,
            self._kafka,
            lambda: self.assignment.generation,
            lambda exc: self._stalls.pause(consumer, exc),
        )
        self._stalls.keep({tp.partition for tp in self.assignment.assigned})
        self._set_connected(self._connected)  # readiness follows the stalls
        started = time.perf_counter()
        # records of a partition revoked meanwhile are left to its new owner
        owned = {
            tp: msgs for tp, msgs in batches.items() if tp in self.assignment.assigned and msgs
        }
        if not owned:  # an empty poll is normal: nothing to produce or commit
            return None
        self._stage("poll", polled, started)  # an idle wait is no record's: timed with records only
        records = list(chain.from_iterable(owned.values()))
        result = await asyncio.to_thread(self._sanitize, records)
        verdict = None
        if self._ledger is not None:  # None when voided: ``_commit`` drops it
            # charged on the JSON outputs (``privacy.ledger.time`` reads them back), then
            # encoded: the records a charge suppresses are never encoded
            verdict = await charging.charge(
                self._ledger, self.assignment, owned, records, result, generation
            )
            if verdict is not None:
                verdict.result = await self._encoded(verdict.result)
        else:
            result = await self._encoded(result)
        ready = self._stage("sanitize", started)
        return Prepared(owned, records, result, generation, started, verdict, ready=ready)

    async def probe(self, producer: AIOKafkaProducer) -> None:
        """Readiness: does a broker answer a small request right now?

        Every ``PROBE_INTERVAL_S``, a metadata request for the input topic goes
        to every known broker over the producer's connections; ready once one
        answers within ``PROBE_TIMEOUT_S``. Lag: not-ready at most interval +
        timeout (3 s) after the brokers stop answering, about one interval when
        connections are refused or reset (the request fails at once); ready
        again at most one interval after a broker answers. An unanswered probe
        is also outage evidence for ``Fencing``. The session runs it as a task.
        """
        while True:
            if await broker_answers(producer.client, self._kafka.input_topic, PROBE_TIMEOUT_S):
                self._reach.reachable()
                self._set_connected(True)
            else:
                self._judge.unreachable()
                missed = f"no broker answered within {PROBE_TIMEOUT_S:.0f} s"
                self._reach.unreachable(missed, again=logging.DEBUG)  # once a second
                self._set_connected(False)
            await asyncio.sleep(PROBE_INTERVAL_S)

    def listener(self, consumer: AIOKafkaConsumer) -> Rebalance:
        """The rebalance listener: it changes ``assignment``, the ledger and the lag gauges."""
        connection = (self._kafka, self._runtime)
        return Rebalance(self.assignment, consumer, connection, self._ledger, self._metrics)

    def _set_connected(self, up: bool) -> None:
        """Readiness: the broker answers, no partition is stopped (``Stalls``) and the
        ledger accepts this replica's clock (``clock``)."""
        self._connected = up
        self._metrics.broker_connected.set(1 if up else 0)
        clock_ok = self._ledger is None or self._ledger.clock.ok
        self._health.ready = up and not self._stalls and clock_ok

    async def _commit(
        self,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
        sender: BatchSender,
        batch: Prepared,
    ) -> None:
        """Release ``batch`` in its own transaction, unless its partitions moved meanwhile.

        After a revoke the consumer restarts every partition it is assigned from
        the committed offsets, so a batch fetched before it is dropped here, not
        released: its partitions' next owner (maybe this worker) fetches it again.
        """
        async with self.assignment.batch_lock:
            if batch.generation != self.assignment.generation:
                log.debug("batch from %s dropped: rebalanced meanwhile", names(set(batch.owned)))
                return
            offsets = batch.offsets
            self._stage("queued", batch.ready)
            if self._kafka.transactions:
                dead = await self._transaction(producer, sender, batch, offsets)
            else:
                began = time.perf_counter()
                dead = await self._send(producer, sender, batch)
                sent = self._stage("produce", began)
                await consumer.commit(offsets)
                self._stage("commit", sent)
            dropped = 0 if batch.verdict is None else batch.verdict.dropped  # over budget
            if self._ledger is not None and batch.verdict is not None:
                self._ledger.committed(batch.verdict)
            for tp, position in offsets.items():
                self._stalls.committed(tp, position)
            self._set_connected(self._connected)  # ready again once no partition is stopped
        self._backoff.reset()
        count, seconds = len(batch.records), time.perf_counter() - batch.started
        self._observe(count, count - len(dead) - dropped, dead, seconds)
        log.debug(
            "batch of %d records from %s: %d dead letters, committed in %.3f s",
            count,
            names(set(batch.owned)),
            len(dead),
            seconds,
        )
        self._metrics.observe_fields(batch.result.observations)
        for tp, position in offsets.items():
            lag = max(0, (consumer.highwater(tp) or position) - position)
            self._metrics.consumer_lag.labels(str(tp.partition)).set(lag)

    async def _transaction(
        self,
        producer: AIOKafkaProducer,
        sender: BatchSender,
        batch: Prepared,
        offsets: dict[TopicPartition, int],
    ) -> list[DeadLetter]:
        txn = self._judge.began()
        if self.assignment.member is None:  # a batch exists only under an assignment
            raise LedgerError(
                "a batch reached its transaction before any assignment (please report)"
            )
        group = GroupId(self._kafka.group_id, self.assignment.member)
        began = time.perf_counter()
        await producer.begin_transaction()
        try:
            dead = await self._send(producer, sender, batch)
            sent = self._stage("produce", began)
            await producer.send_offsets_to_transaction(offsets, group)
            await producer.commit_transaction()
            self._stage("commit", sent)
        except BaseException as exc:
            if is_stale_member(exc):
                self._metrics.stale_commits.inc()
            self._judge.failed(txn)  # before the session closes every connection
            self._metrics.transactions.labels("aborted").inc()
            with contextlib.suppress(Exception):  # the session restarts either way
                await asyncio.wait_for(producer.abort_transaction(), CLOSE_TIMEOUT_S)
            raise
        self._metrics.transactions.labels("committed").inc()
        return dead

    async def _send(
        self, producer: AIOKafkaProducer, sender: BatchSender, batch: Prepared
    ) -> list[DeadLetter]:
        """Queue a batch's messages (with a ledger: its changelog records first)."""
        if self._ledger is None:
            return await sender.send(batch.records, batch.result)
        return await charging.send(self._ledger, producer, sender, batch)

    async def _encoded(self, result: BatchResult) -> BatchResult:
        """The outputs as Avro or Protobuf once the output schema is registered (in a
        thread: CPU)."""
        if self._encoder is None:
            return result
        return await asyncio.to_thread(self._encoder.encode, result)

    def _stage(self, stage: str, since: float, until: float | None = None) -> float:
        """Observe a batch step that ran from ``since`` to ``until`` (default: now); returns
        ``until``, where the next step starts."""
        until = time.perf_counter() if until is None else until
        self._metrics.batch_stage_seconds.labels(stage).observe(until - since)
        return until

    def _observe(self, count: int, out: int, dead: list[DeadLetter], seconds: float) -> None:
        m = self._metrics
        m.records_in.inc(count)
        m.records_out.inc(out)
        m.count_dead_letters(dead)
        m.batch_records.observe(count)
        m.batch_seconds.observe(seconds)

"""The consume -> sanitize -> produce loop: a thin shell around ``process_batch``.

Delivery: exactly once. Each polled batch becomes one Kafka transaction that
holds its sanitized messages, its dead letters and the consumed offsets
(aiokafka's transactional producer, ``send_offsets_to_transaction``), so a
reader with ``isolation_level=read_committed`` sees every raw record's
release once or not at all. Each record's noise is keyed on (secret, topic,
partition, offset, raw bytes, field release): a batch replayed after a crash
or an aborted transaction is released with the very same bytes, so even an
aborted copy that a ``read_uncommitted`` reader saw gives no second draw.

Fencing: aiokafka commits transactional offsets without the group
generation, so zombies are fenced by a transactional id that is stable per
replica (a restarted replica aborts its predecessor's open transaction),
and a rebalance waits for the batch in flight to commit before the
partitions move (``_Rebalance``).

Faults: aiokafka retries a dropped connection or a slow request inside the
session. An error it gives up on ends the session (the open transaction is
aborted, both clients are closed) and a new one starts after an exponential
backoff, from the committed offsets. So does a fencing after an outage: the
broker aborted a transaction older than ``transaction_timeout_ms`` and
bumped the epoch (``clients.Fencing`` tells that from a second worker).
Errors a human must fix (``clients.final_error``) stop the worker with a
message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random  # csprng-ok: backoff jitter only, never noise
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from aiokafka import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRecord,
    TopicPartition,
)
from aiokafka.errors import KafkaConnectionError, KafkaError

from privstream.config import KafkaConfig
from privstream.config.runtime import Runtime
from privstream.mechanisms.rng import NoiseKeys
from privstream.metrics import Metrics
from privstream.pipeline import BatchResult, RecordPlan, process_batch
from privstream.pipeline.noise import Replayable
from privstream.pipeline.results import DeadLetter, Observation, merge_observations
from privstream.worker.clients import (
    Fencing,
    broker_answers,
    consumer_options,
    diagnose,
    final_error,
    is_fenced,
    live_connections,
    producer_options,
    transactional_id,
)
from privstream.worker.decode import UndecodableRecord, tolerate_undecodable_records
from privstream.worker.http import Health
from privstream.worker.ledger_store import LedgerSender, LedgerStore
from privstream.worker.produce import BatchSender, source_of
from privstream.worker.rebalance import Rebalance, names

log = logging.getLogger("privstream.worker")

Batches = dict[TopicPartition, list[ConsumerRecord]]
#: errors after which a new session may succeed (the broker may come back)
RETRIABLE = (KafkaError, OSError, TimeoutError)
#: readiness probe: a one-topic metadata request per period, unanswered after the timeout
PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 2.0
UNDECODABLE_DETAIL = (
    "a header key is not UTF-8, so the Kafka client cannot decode the record; its headers "
    "are copied here with such keys escaped (\\xNN), key and value as they are"
)
CLOSE_TIMEOUT_S = 10.0


def describe(exc: BaseException) -> str:
    """``Name: message`` once (aiokafka's messages often start with their class name)."""
    name, text = type(exc).__name__, str(exc)
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"


class Backoff:
    """Exponential delays with full jitter, reset after a committed batch."""

    def __init__(self, initial_s: float = 0.2, cap_s: float = 30.0) -> None:
        self._initial = initial_s
        self._cap = cap_s
        self._next = initial_s

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._cap)
        return random.uniform(delay / 2, delay)  # noqa: S311 -- jitter, not noise

    def reset(self) -> None:
        self._next = self._initial


class Worker:
    """Owns the Kafka clients; everything else is delegated."""

    def __init__(
        self,
        kafka: KafkaConfig,
        plan: RecordPlan,
        runtime: Runtime,
        *,
        metrics: Metrics,
        health: Health,
        ledger: LedgerStore | None = None,
    ) -> None:
        self._kafka = kafka
        self._ledger = ledger
        self._plan = plan
        self._runtime = runtime
        self._metrics = metrics
        self._health = health
        self._keys = NoiseKeys(runtime.noise_secret, kafka.input_topic, kafka.noise_domain)
        self._batch_lock = asyncio.Lock()
        self._assigned: set[TopicPartition] = set()
        self._backoff = Backoff()
        tolerate_undecodable_records()
        # what a fencing is judged by (clients.Fencing), all time.monotonic()
        self._producer_client: Any = None
        self._producer_since = 0.0
        self._txn_age_s: float | None = None  # of the transaction that failed, if one did
        self._txn_outage = False  # a connection dropped or the probe failed since it began
        self._unreachable_at = float("-inf")
        self._fenced_before = False

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
            except RETRIABLE as exc:
                fencing = self._fencing(exc)
                final = final_error(exc, self._kafka, self._runtime, fencing)
                if final is None and isinstance(exc, KafkaConnectionError):
                    final = await diagnose(self._kafka, self._runtime)
                if final is not None:
                    raise final from None
                self._set_connected(False)
                self._fenced_before = fencing is not None
                delay = self._backoff.next_delay()
                if fencing is not None and fencing.expired:
                    self._metrics.transactions_expired.inc()
                why = (
                    f"Kafka session ended ({describe(exc)})"
                    if fencing is None
                    else fencing.explain(self._kafka, self._runtime)
                )
                log.warning("%s; reconnecting in %.1f s", why, delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)

    def _fencing(self, exc: BaseException) -> Fencing | None:
        """What this session saw, if ``exc`` is a fencing; None otherwise."""
        if not is_fenced(exc):
            return None
        producer_age = time.monotonic() - self._producer_since
        return Fencing(
            transaction_age_s=self._txn_age_s,
            timeout_s=self._kafka.transaction_timeout_ms / 1000,
            connection_lost=self._txn_outage,
            refenced_after_s=producer_age if self._fenced_before else None,
            producer_age_s=producer_age,
        )

    async def _session(self, stop: asyncio.Event) -> None:
        """One pair of clients, from start to ``stop`` or the first broker error."""
        self._txn_age_s = None
        async with contextlib.AsyncExitStack() as stack:
            producer = AIOKafkaProducer(**producer_options(self._kafka, self._runtime))
            stack.push_async_callback(_close, producer)
            await producer.start()
            self._producer_since, self._producer_client = time.monotonic(), producer.client
            if self._ledger is not None:  # a new session restores the ledger from the changelog
                stack.push_async_callback(self._ledger.close)
                await self._ledger.open()
            consumer = AIOKafkaConsumer(**consumer_options(self._kafka, self._runtime))
            stack.push_async_callback(_close, consumer)
            consumer.subscribe([self._kafka.input_topic], listener=Rebalance(self, consumer))
            await consumer.start()
            probe = asyncio.create_task(self._probe(producer))
            stack.callback(probe.cancel)
            self._set_connected(True)
            plain = BatchSender(
                producer,
                self._plan,
                self._kafka.output_topic,
                self._kafka.dead_letter_topic,
                max_message_bytes=self._kafka.max_message_bytes,
                extra_headers=self._ledger.output_headers if self._ledger else (),
            )
            sender = plain if self._ledger is None else LedgerSender(plain, self._ledger, producer)
            while not stop.is_set():
                batches = await consumer.getmany(
                    timeout_ms=self._kafka.poll_timeout_ms,
                    max_records=self._kafka.max_batch_records,
                )
                if not batches:  # an empty poll is normal: nothing to produce or commit
                    continue
                async with self._batch_lock:
                    await self._handle(consumer, producer, sender, batches)
                self._backoff.reset()

    async def _probe(self, producer: AIOKafkaProducer) -> None:
        """Readiness: does a broker answer a small request right now?

        Every ``PROBE_INTERVAL_S``, a metadata request for the input topic goes
        to every known broker over the producer's connections; ready once one
        answers within ``PROBE_TIMEOUT_S``. Lag: not-ready at most interval +
        timeout (3 s) after the brokers stop answering, about one interval when
        connections are refused or reset (the request fails at once); ready
        again at most one interval after a broker answers. An unanswered probe
        is also outage evidence for ``Fencing``.
        """
        while True:
            if await broker_answers(producer.client, self._kafka.input_topic, PROBE_TIMEOUT_S):
                self._set_connected(True)
            else:
                self._unreachable_at = time.monotonic()
                self._set_connected(False)
            await asyncio.sleep(PROBE_INTERVAL_S)

    def _set_connected(self, up: bool) -> None:
        if up != self._health.ready:
            log.info("broker %s", "reachable" if up else "unreachable")
        self._health.ready = up
        self._metrics.broker_connected.set(1 if up else 0)

    async def _handle(
        self,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
        sender: BatchSender | LedgerSender,
        batches: Batches,
    ) -> None:
        started = time.perf_counter()
        # records of a partition revoked meanwhile are left to its new owner
        owned = {tp: msgs for tp, msgs in batches.items() if tp in self._assigned and msgs}
        records = [record for msgs in owned.values() for record in msgs]
        if not records:
            return
        offsets = {tp: msgs[-1].offset + 1 for tp, msgs in owned.items()}
        result = self._sanitize(records)
        if self._kafka.transactions:
            dead = await self._transaction(producer, sender, records, result, offsets)
        else:
            dead = await sender.send(records, result)
            await consumer.commit(offsets)
        seconds = time.perf_counter() - started
        dropped = sender.dropped if isinstance(sender, LedgerSender) else 0  # over budget
        self._observe(len(records), len(records) - len(dead) - dropped, dead, seconds)
        log.debug(
            "batch of %d records from %s: %d dead letters, committed in %.3f s",
            len(records),
            names(set(owned)),
            len(dead),
            seconds,
        )
        self._metrics.observe_fields(result.observations)
        for tp, position in offsets.items():
            lag = max(0, (consumer.highwater(tp) or position) - position)
            self._metrics.consumer_lag.labels(str(tp.partition)).set(lag)

    async def _transaction(
        self,
        producer: AIOKafkaProducer,
        sender: BatchSender | LedgerSender,
        records: Sequence[ConsumerRecord],
        result: BatchResult,
        offsets: dict[TopicPartition, int],
    ) -> list[DeadLetter]:
        links = live_connections(self._producer_client)
        began = time.monotonic()
        await producer.begin_transaction()
        try:
            dead = await sender.send(records, result)
            await producer.send_offsets_to_transaction(offsets, self._kafka.group_id)
            await producer.commit_transaction()
        except BaseException:
            # judged now, before the session closes every connection (for a fencing)
            self._txn_age_s = time.monotonic() - began
            dropped = any(not conn.connected() for conn in links)
            self._txn_outage = dropped or self._unreachable_at >= began
            self._metrics.transactions.labels("aborted").inc()
            with contextlib.suppress(Exception):  # the session restarts either way
                await asyncio.wait_for(producer.abort_transaction(), CLOSE_TIMEOUT_S)
            raise
        self._metrics.transactions.labels("committed").inc()
        return dead

    def _noise(self, records: Sequence[ConsumerRecord], values: Sequence[bytes]) -> Replayable:
        partitions = np.fromiter((r.partition for r in records), np.int64, len(records))
        offsets = np.fromiter((r.offset for r in records), np.int64, len(records))
        return Replayable(self._keys, partitions, offsets, values)

    def _sanitize(self, records: Sequence[ConsumerRecord]) -> BatchResult:
        """Records the client could not decode are dead letters; the others are sanitized."""
        poison = [i for i, r in enumerate(records) if isinstance(r, UndecodableRecord)]
        if not poison:
            return self._sanitize_decoded(records)
        for i in poison:
            log.error("record %s cannot be decoded (%s)", source_of(records[i]), records[i].problem)
        skipped = set(poison)
        keep = [i for i in range(len(records)) if i not in skipped]
        part = self._sanitize_decoded([records[i] for i in keep])
        result = BatchResult(
            outputs=part.outputs,
            output_index=[keep[i] for i in part.output_index],
            observations=part.observations,
        )
        result.dead_letters.extend(
            DeadLetter(keep[d.index], d.reason, d.detail) for d in part.dead_letters
        )
        result.dead_letters.extend(
            DeadLetter(i, records[i].problem, UNDECODABLE_DETAIL) for i in poison
        )
        result.dead_letters.sort(key=lambda d: d.index)
        return result

    def _sanitize_decoded(self, records: Sequence[ConsumerRecord]) -> BatchResult:
        """``process_batch``; a record that breaks it is dead-lettered alone, never retried."""
        values = [r.value or b"" for r in records]
        keys = [r.key for r in records]  # the trusted device identity of key-memoized fields
        try:
            return process_batch(self._plan, values, self._noise(records, values), keys)
        except Exception as exc:  # a bug in a handler must not block the partition
            log.error("batch failed (%s); sanitizing its records one by one", type(exc).__name__)
        result = BatchResult()
        parts: list[dict[str, Observation]] = []
        for index, record in enumerate(records):
            try:
                one_value = values[index : index + 1]
                one = process_batch(
                    self._plan, one_value, self._noise([record], one_value), keys[index : index + 1]
                )
            except Exception as exc:  # isolate the poison record
                log.error(
                    "record %s cannot be sanitized (%s)", source_of(record), type(exc).__name__
                )
                detail = f"internal error ({type(exc).__name__}) while sanitizing; please report"
                result.dead_letters.append(DeadLetter(index, "internal_error", detail))
                continue
            result.outputs.extend(one.outputs)
            result.output_index.extend(index for _ in one.outputs)
            result.dead_letters.extend(
                DeadLetter(index, d.reason, d.detail) for d in one.dead_letters
            )
            parts.append(one.observations)
        result.observations.update(merge_observations(parts))
        return result

    def _observe(self, count: int, out: int, dead: list[DeadLetter], seconds: float) -> None:
        m = self._metrics
        m.records_in.inc(count)
        m.records_out.inc(out)
        m.count_dead_letters(dead)
        m.batch_records.observe(count)
        m.batch_seconds.observe(seconds)


async def _close(client: AIOKafkaConsumer | AIOKafkaProducer) -> None:
    """Stop a client without letting a dead broker hold the shutdown."""
    try:
        await asyncio.wait_for(client.stop(), CLOSE_TIMEOUT_S)
    except Exception as exc:  # closing is best effort
        log.debug("closing %s: %s", type(client).__name__, type(exc).__name__)

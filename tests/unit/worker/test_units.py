"""The worker's pure parts, without a broker: poison isolation, replay noise, oversize messages.

The broker-facing behaviour (transactions, kills, rebalances, outages) is
tested against a real broker in tests/integration.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import ConsumerRecord
from aiokafka.errors import (
    InvalidProducerEpoch,
    MessageSizeTooLargeError,
    NodeNotReadyError,
    ProducerFenced,
)
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from privstream.config import parse_config
from privstream.config.runtime import Runtime
from privstream.errors import BrokerError
from privstream.kinds import build_plan
from privstream.metrics import Metrics
from privstream.pipeline import RecordPlan
from privstream.pipeline.handlers import RealHandler
from privstream.worker import loop
from privstream.worker.clients import (
    RIVAL_WINDOW_S,
    Fencing,
    broker_answers,
    final_error,
    live_connections,
)
from privstream.worker.fencing_judge import FencingJudge
from privstream.worker.http import Health
from privstream.worker.ledger_store import LedgerStore
from privstream.worker.loop import Worker
from privstream.worker.produce import BatchSender, output_headers
from privstream.worker.restart import Backoff
from privstream.worker.sanitize import Sanitize, Sanitizer
from prometheus_client import CollectorRegistry

from tests.support.configs import config_dict
from tests.support.faults import poll_until

FIELDS = [
    {"name": "seq", "kind": "public"},
    {"name": "x", "kind": "real", "mechanism": "laplace", "bounds": [0, 10], "epsilon": 1.0},
]
POISON = 6.5  # the value the broken handler chokes on


def record(offset: int, value: bytes, partition: int = 0) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic="raw",
        partition=partition,
        offset=offset,
        timestamp=0,
        timestamp_type=0,
        key=None,
        value=value,
        checksum=None,
        serialized_key_size=0,
        serialized_value_size=len(value),
        headers=[],
    )


class BrokenHandler(RealHandler):
    """A handler with a bug: any batch holding POISON raises a non-Rejected error."""

    def release(self, values: Any, source: Any) -> list[Any]:
        if POISON in values:
            raise ZeroDivisionError("bug")
        return super().release(values, source)


CONFIG = parse_config(config_dict(FIELDS, epsilon=1.0))
SECRET = bytes(range(32))


def plan(broken: bool = False) -> RecordPlan:
    built = build_plan(CONFIG)
    if not broken:
        return built
    real = built.handlers[1]
    assert isinstance(real, RealHandler)
    return built.with_handlers((built.handlers[0], BrokenHandler(real.name, real.mechanism)))


def sanitizer(broken: bool = False, secret: bytes = SECRET) -> Sanitizer:
    """What ``worker()`` sanitizes with by default (``broken``: its plan has the bug)."""
    return Sanitizer.for_input(CONFIG.kafka, plan(broken), Runtime(secret, "r0", None), None)


def worker(
    sanitize: Sanitize | None = None,
    *,
    metrics: Metrics | None = None,
    health: Health | None = None,
    ledger: LedgerStore | None = None,
    judge: FencingJudge | None = None,
    **kafka: Any,
) -> Worker:
    """A worker on FIELDS; ``kafka`` overrides its Kafka config."""
    return Worker(
        CONFIG.kafka.model_copy(update=kafka),
        plan(),
        Runtime(SECRET, "r0", None),
        metrics=metrics or Metrics(CollectorRegistry()),
        health=health or Health(),
        ledger=ledger,
        sanitizer=sanitize,
        judge=judge,
    )


def batch(values: list[float], start: int = 100) -> list[ConsumerRecord[bytes, bytes]]:
    return [
        record(start + i, json.dumps({"seq": i, "x": v}).encode()) for i, v in enumerate(values)
    ]


def test_a_poison_record_is_dead_lettered_alone_and_the_rest_released_as_usual() -> None:
    records = batch([1.0, POISON, 3.0, 4.0])
    result = sanitizer(broken=True)(records)
    assert [d.index for d in result.dead_letters] == [1]
    assert result.dead_letters[0].reason == "internal_error"
    assert "ZeroDivisionError" in result.dead_letters[0].detail
    assert result.output_index == [0, 2, 3]
    # the survivors carry the same bytes a healthy batch without the poison gives them
    healthy = sanitizer()([records[0], records[2], records[3]])
    assert result.outputs == healthy.outputs


def test_replayed_records_get_identical_bytes_however_batched() -> None:
    records = batch([1.0, 2.0, 3.0, 4.0, 5.0])
    whole = sanitizer()(records).outputs
    split = sanitizer()(records[:2]).outputs + sanitizer()(records[2:]).outputs
    assert whole == split
    other_key = sanitizer(secret=bytes(range(1, 33)))(records).outputs
    assert other_key != whole


def test_the_same_value_at_another_offset_gets_other_noise() -> None:
    first = sanitizer()(batch([5.0] * 50, start=0)).outputs
    values = {json.loads(out)["x"] for out in first}
    assert len(values) > 40  # Laplace noise on a grid: collisions are rare (p < 1e-6 for 10)


def test_backoff_doubles_with_jitter_up_to_the_cap_and_resets() -> None:
    backoff = Backoff(initial_s=1.0, cap_s=8.0)
    delays = [backoff.next_delay() for _ in range(6)]
    for delay, nominal in zip(delays, [1, 2, 4, 8, 8, 8], strict=True):
        assert nominal / 2 <= delay <= nominal
    backoff.reset()
    assert backoff.next_delay() <= 1.0


class SizeLimitedProducer:
    """Stands in for the producer's size check and its batch API (4 output partitions).

    ``send`` refuses a value over ``limit``; batches are
    real aiokafka ``BatchBuilder``s of ``batch_bytes``, unpacked into ``sent``.
    """

    def __init__(self, limit: int, batch_bytes: int = 16_384) -> None:
        self.limit = limit
        self.batch_bytes = batch_bytes
        self.sent: list[tuple[str, bytes | None, list[tuple[str, bytes]]]] = []
        self.batches: list[tuple[int, list[bytes | None]]] = []  # (partition, values)

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1, 2, 3}

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(self.batch_bytes, 0)

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> Any:
        records = list(DefaultRecordBatch(bytes(batch._build())))
        self.sent.extend((topic, r.value, r.headers) for r in records)
        self.batches.append((partition, [r.value for r in records]))
        return self._done()

    async def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, headers: Any = None
    ) -> Any:
        if value is not None and len(value) > self.limit:
            raise MessageSizeTooLargeError()
        self.sent.append((topic, value, headers))
        return self._done()

    @staticmethod
    def _done() -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future


def sender_for(producer: SizeLimitedProducer, for_plan: RecordPlan | None = None) -> BatchSender:
    """The sender a worker on ``for_plan`` (default: FIELDS') would use with ``producer``."""
    return BatchSender(
        producer,  # type: ignore[arg-type]
        for_plan or plan(),
        "out",
        "dlq",
        max_message_bytes=producer.limit,
        batch_bytes=producer.batch_bytes,
        transactional=False,
    )


@pytest.mark.parametrize("limit", [150, 10_000])
async def test_oversize_messages_never_block_the_batch(limit: int) -> None:
    records = [*batch([1.0, 2.0]), record(7, b"x" * 200)]
    result = sanitizer()(records)
    producer = SizeLimitedProducer(limit)
    dead = await sender_for(producer).send(records, result)
    topics = [topic for topic, _, _ in producer.sent]
    assert len(producer.sent) == 3  # every record accounted for, once
    if limit == 10_000:
        assert topics.count("out") == 2 and [d.reason for d in dead] == ["invalid_json"]
    else:
        # outputs over the limit with their headers (the producer's estimate) became dead
        # letters; the raw copy over the limit went without its value, the others with theirs
        assert topics == ["dlq", "dlq", "dlq"]
        assert sorted(d.reason for d in dead) == [
            "invalid_json",
            "output_too_large",
            "output_too_large",
        ]
        values = {dict(h)["privstream-source"]: v for _, v, h in producer.sent}
        assert values == {
            b"raw/0/100": records[0].value,
            b"raw/0/101": records[1].value,
            b"raw/0/7": b"",
        }


def test_the_quick_size_check_agrees_with_the_producers_estimate() -> None:
    """Values the sender passes without estimating them are never too large."""
    limit = 4_096
    sender = sender_for(SizeLimitedProducer(limit))
    headers = output_headers(plan())
    for length in range(limit - 400, limit + 2):
        value = b"x" * length
        too_large = DefaultRecordBatchBuilder.estimate_size_in_bytes(None, value, headers) > limit
        assert (length > sender._surely_fits and sender._too_large(value)) == too_large


async def test_batches_keep_each_input_partition_in_order_on_one_output_partition() -> None:
    # 6 input partitions onto 4 output partitions, small batches: several builders each
    records = [
        record(100 + i, json.dumps({"seq": i, "x": 1.0}).encode(), partition=i % 6)
        for i in range(600)
    ]
    result = sanitizer()(records)
    producer = SizeLimitedProducer(10_000, batch_bytes=4_096)
    dead = await sender_for(producer).send(records, result)
    assert dead == []
    assert len(producer.batches) > 4  # the builders filled up and were chained
    seqs: dict[int, list[int]] = {}
    for partition, values in producer.batches:
        seqs.setdefault(partition, []).extend(json.loads(v or b"")["seq"] for v in values)
    assert sorted(s for part in seqs.values() for s in part) == list(range(600))
    for partition, part in seqs.items():
        for source in {s % 6 for s in part}:
            assert source % 4 == partition  # input partition modulo the output count
            mine = [s for s in part if s % 6 == source]
            assert mine == sorted(mine)  # in offset order
    headers = {tuple(h) for topic, _, h in producer.sent if topic == "out"}
    assert len(headers) == 1 and dict(next(iter(headers)))["privstream-epsilon"] == b"1.0"


# --- fencing: an expired transaction or a rival --------------------------------------------

TIMEOUT_S = 60.0  # the config's default transaction_timeout_ms, in seconds


OLD = TIMEOUT_S + 10  # a producer older than the timeout: its transaction may have expired


@pytest.mark.parametrize(
    ("age", "lost", "refenced", "producer", "expired", "rival"),
    [
        (TIMEOUT_S + 1, False, None, OLD, True, False),  # outlived the timeout: the broker aborted
        (2.0, True, None, OLD, True, False),  # a connection dropped meanwhile
        (2.0, False, None, OLD, False, False),  # no evidence, first fencing: try a fresh producer
        (2.0, False, 3.0, 3.0, False, True),  # the fresh producer fenced again at once: a rival
        # again after more than 30 s, but younger than the timeout: still no expiry possible
        (2.0, False, RIVAL_WINDOW_S + 1, RIVAL_WINDOW_S + 1, False, True),
        (2.0, True, OLD, OLD, True, False),  # again, older than the timeout, after an outage
        (TIMEOUT_S + 1, False, 3.0, OLD, True, False),  # again, but expired: an outage, no rival
        (None, True, None, OLD, False, False),  # nothing open: a dropped connection proves nothing
        # a probe unanswered on a loaded machine, but the producer is younger than the timeout:
        # the broker cannot have aborted its transaction for age, so it is a rival
        (2.0, True, 3.0, 3.0, False, True),
    ],
)
def test_fencing_tells_an_expired_transaction_from_a_rival(
    age: float | None,
    lost: bool,
    refenced: float | None,
    producer: float,
    expired: bool,
    rival: bool,
) -> None:
    fencing = Fencing(
        transaction_age_s=age,
        timeout_s=TIMEOUT_S,
        connection_lost=lost,
        refenced_after_s=refenced,
        producer_age_s=producer,
    )
    assert (fencing.expired, fencing.rival) == (expired, rival)
    final = final_error(
        InvalidProducerEpoch(), CONFIG.kafka, Runtime(bytes(32), "r0", None), fencing
    )
    assert (final is not None) == rival
    if final is not None:
        assert f"fenced again {refenced:.1f} s after a fencing restarted it" in str(final)
        assert "own --replica-id" in str(final) and "'privstream-r0'" in str(final)


class Conn:
    def __init__(self, up: bool) -> None:
        self.up = up

    def connected(self) -> bool:
        return self.up


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def fenced(
    judge: FencingJudge, clock: Clock, *, producer_age: float, txn_age: float, dropped: bool = False
) -> ProducerFenced:
    """A session whose producer ran ``producer_age`` s, the last ``txn_age`` s in a transaction
    that failed fenced (``dropped``: a broker connection dropped meanwhile)."""
    judge.session_started()
    conn = Conn(True)
    judge.producer_started(SimpleNamespace(_conns={(1, 0): conn}))
    clock.now += producer_age - txn_age
    txn = judge.began()
    conn.up = not dropped
    clock.now += txn_age
    judge.failed(txn)
    return ProducerFenced()


def expired(metrics: Metrics) -> int:
    sample = metrics.registry.get_sample_value("privstream_transactions_expired_total")
    assert sample is not None
    return int(sample)


async def test_a_transaction_expired_in_an_outage_restarts_the_session_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the first transaction outlived the timeout; the fresh producer's first one saw a dropped
    # connection (fenced again within seconds, but with an outage: still no rival). The
    # timeout is the shortest allowed, 1 s, so the 2 s old fresh producer can have expired.
    clock, metrics = Clock(), Metrics(CollectorRegistry())
    judge = FencingJudge(1.0, clock)
    w = worker(metrics=metrics, judge=judge, transaction_timeout_ms=1_000)
    with caplog.at_level(logging.WARNING, "privstream.worker"):
        await w.recover(fenced(judge, clock, producer_age=300, txn_age=TIMEOUT_S + 5))
        await w.recover(fenced(judge, clock, producer_age=2, txn_age=1, dropped=True))
    assert expired(metrics) == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert all(m.startswith("transaction expired during an outage") for m in warnings)
    assert "transaction_timeout_ms 1000" in warnings[0]
    assert "the broker unreachable meanwhile" in warnings[1]


async def test_a_fresh_producer_fenced_again_without_an_outage_stops_the_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, metrics = Clock(), Metrics(CollectorRegistry())
    judge = FencingJudge(TIMEOUT_S, clock)
    w = worker(metrics=metrics, judge=judge)
    rival = re.escape("fenced again 2.0 s after a fencing restarted it")
    with caplog.at_level(logging.WARNING, "privstream.worker"):
        # first: give it a chance
        await w.recover(fenced(judge, clock, producer_age=300, txn_age=1))
        with pytest.raises(BrokerError, match=rival):  # again at once: a rival
            await w.recover(fenced(judge, clock, producer_age=2, txn_age=1))
    assert expired(metrics) == 0
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith("producer fenced with no outage seen")
    assert "'privstream-r0'" in warning


async def test_recovering_waits_longer_after_each_failed_session() -> None:
    w = worker()
    delays = [await w.recover(OSError("connection reset")) for _ in range(3)]
    for delay, nominal in zip(delays, [0.2, 0.4, 0.8], strict=True):
        assert nominal / 2 <= delay <= nominal  # Backoff's defaults


# --- readiness probe -------------------------------------------------------------------------


class Brokers:
    """An aiokafka client stand-in: each node answers, refuses or never answers."""

    def __init__(self, **nodes: str) -> None:
        self.nodes = {int(name[1:]): how for name, how in nodes.items()}
        self.cluster = SimpleNamespace(
            brokers=lambda: [SimpleNamespace(nodeId=n) for n in self.nodes]
        )
        self.hanging = 0  # sends still waiting: the probe must not leave any behind

    async def send(self, node: int, request: Any) -> object:
        how = self.nodes[node]
        if how == "refuse":
            raise NodeNotReadyError(f"node {node}")
        if how == "hang":
            self.hanging += 1
            try:
                await asyncio.Event().wait()
            finally:
                self.hanging -= 1
        return request


@pytest.mark.parametrize(
    ("nodes", "answers"),
    [
        ({"n1": "answer"}, True),
        ({"n1": "hang", "n2": "refuse", "n3": "answer"}, True),  # one broker is enough
        ({"n1": "hang", "n2": "refuse"}, False),
        ({"n1": "refuse"}, False),
        ({}, False),  # no broker known
    ],
)
async def test_broker_answers_needs_one_round_trip_within_the_timeout(
    nodes: dict[str, str], answers: bool
) -> None:
    client = Brokers(**nodes)
    started = time.monotonic()
    assert await broker_answers(client, "raw", timeout_s=0.2) is answers
    assert time.monotonic() - started < 5  # bounded by the timeout, never by a hanging broker
    assert client.hanging == 0


async def eventually(done: Callable[[], bool], what: str, within_s: float = 5) -> None:
    """``faults.poll_until`` on a plain condition, every 5 ms."""

    async def probe() -> bool:
        return done()

    await poll_until(probe, within_s, what, every_s=0.005)


async def test_readiness_follows_the_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop, "PROBE_INTERVAL_S", 0.01)
    monkeypatch.setattr(loop, "PROBE_TIMEOUT_S", 0.05)
    metrics, health, judge = Metrics(CollectorRegistry()), Health(), FencingJudge(TIMEOUT_S)
    w = worker(metrics=metrics, health=health, judge=judge)
    client = Brokers(n1="answer")
    connected = metrics.broker_connected
    probe = asyncio.create_task(w.probe(SimpleNamespace(client=client)))  # type: ignore[arg-type]
    try:
        await eventually(lambda: health.ready, "ready")
        assert judge.unreachable_at == float("-inf")
        client.nodes[1] = "hang"  # a blackhole: nothing refused, nothing answered
        await eventually(lambda: not health.ready, "not ready")
        assert connected._value.get() == 0
        assert judge.unreachable_at > 0
        client.nodes[1] = "answer"
        await eventually(lambda: health.ready, "ready again")
        assert connected._value.get() == 1
    finally:
        probe.cancel()
        await asyncio.gather(probe, return_exceptions=True)


def test_live_connections_are_the_connected_ones_but_bootstrap() -> None:
    up, down, boot = Conn(True), Conn(False), Conn(True)
    client = SimpleNamespace(_conns={(1, 0): up, (2, 0): down, ("bootstrap", 0): boot})
    assert live_connections(client) == (up,)  # aiokafka closes bootstrap on purpose
    assert live_connections(SimpleNamespace()) == ()  # an aiokafka without _conns: no evidence

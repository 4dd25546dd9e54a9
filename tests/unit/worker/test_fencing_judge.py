"""``FencingJudge``: the timers behind a fencing verdict, on a clock the test moves, and the
worker feeding it when a transaction fails."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaError, ProducerFenced
from privstream.worker.fencing_judge import FencingJudge
from privstream.worker.generation_fence import Member

from tests.unit.worker.test_pipeline import TP, ScriptedConsumer, TransactionalProducer
from tests.unit.worker.test_units import Clock, Conn, batch, sender_for, worker


def started(
    conns: dict[tuple[object, int], Conn], timeout_s: float = 60.0
) -> tuple[FencingJudge, Clock]:
    """A judge whose session and producer (with ``conns``) started at the clock's now."""
    clock = Clock()
    judge = FencingJudge(timeout_s, clock)
    judge.session_started()
    judge.producer_started(SimpleNamespace(_conns=conns))
    return judge, clock


def test_ages_are_read_on_the_injected_clock() -> None:
    judge, clock = started({(1, 0): Conn(True)})
    clock.now += 70.0
    txn = judge.began()
    clock.now += 2.5
    judge.failed(txn)
    clock.now += 0.5  # the session closing
    fencing = judge.judge(ProducerFenced())
    assert fencing is not None
    assert (fencing.transaction_age_s, fencing.producer_age_s) == (2.5, 73.0)
    assert (fencing.connection_lost, fencing.refenced_after_s) == (False, None)
    assert not fencing.expired and not fencing.rival


def test_no_transaction_failed_in_a_session_means_no_transaction_age() -> None:
    judge, clock = started({})
    txn = judge.began()
    judge.failed(txn)
    judge.session_started()  # the next session: the failure before is not its own
    clock.now += 1.0
    fencing = judge.judge(ProducerFenced())
    assert fencing is not None and fencing.transaction_age_s is None


@pytest.mark.parametrize(
    ("probe_failed", "lost"),
    [(None, False), ("before", False), ("during", True)],
)
def test_an_unanswered_probe_is_an_outage_only_while_the_transaction_is_open(
    probe_failed: str | None, lost: bool
) -> None:
    judge, clock = started({(1, 0): Conn(True)})
    if probe_failed == "before":
        judge.unreachable()
    clock.now += 1.0
    txn = judge.began()
    if probe_failed == "during":
        judge.unreachable()
    clock.now += 1.0
    judge.failed(txn)
    fencing = judge.judge(ProducerFenced())
    assert fencing is not None and fencing.connection_lost is lost


def test_a_connection_is_an_outage_only_if_up_when_the_transaction_began() -> None:
    up, down = Conn(True), Conn(False)
    judge, _ = started({(1, 0): up, (2, 0): down, ("bootstrap", 0): Conn(True)})
    txn = judge.began()
    judge.failed(txn)  # ``down`` was down already, ``bootstrap`` is closed on purpose
    fencing = judge.judge(ProducerFenced())
    assert fencing is not None and not fencing.connection_lost
    txn = judge.began()
    up.up = False
    judge.failed(txn)
    fencing = judge.judge(ProducerFenced())
    assert fencing is not None and fencing.connection_lost


def test_a_fencing_after_a_fencing_reports_the_fresh_producers_age() -> None:
    judge, clock = started({})
    assert judge.judge(ProducerFenced()) is not None
    judge.session_started()
    judge.producer_started(SimpleNamespace(_conns={}))
    clock.now += 4.0
    again = judge.judge(ProducerFenced())
    assert again is not None and again.refenced_after_s == 4.0 and again.rival
    assert judge.judge(OSError("reset")) is None  # no fencing: the next starts afresh
    assert judge.judge(ProducerFenced()).refenced_after_s is None  # type: ignore[union-attr]


def test_a_wrapped_fencing_counts_and_other_errors_are_no_fencing() -> None:
    judge, _ = started({})
    try:  # aiokafka may wrap it: the cause chain counts
        raise KafkaError("transaction failed") from ProducerFenced()
    except KafkaError as wrapped:
        assert judge.judge(wrapped) is not None
    assert judge.judge(KafkaConnectionError()) is None


class FencedProducer(TransactionalProducer):
    """Its commit is fenced; ``during`` runs first."""

    def __init__(self, during: Callable[[], None]) -> None:
        super().__init__()
        self.during = during

    async def commit_transaction(self) -> None:
        self.during()
        raise ProducerFenced()


@pytest.mark.parametrize("outage", ["none", "connection dropped", "probe unanswered"])
async def test_an_outage_is_judged_when_the_transaction_fails_not_after(outage: str) -> None:
    # a rival, unless an outage: the producer is older than the (shortest) transaction
    # timeout, so an expiry is possible, and the session before ended fenced 5 s ago
    first, second = Conn(True), Conn(True)
    judge, clock = started({}, timeout_s=1.0)
    assert judge.judge(ProducerFenced()) is not None
    judge.session_started()
    judge.producer_started(SimpleNamespace(_conns={(1, 0): first, (1, 1): second}))
    clock.now += 5.0

    def during() -> None:
        if outage == "connection dropped":
            second.up = False
        elif outage == "probe unanswered":
            judge.unreachable()

    w, stop, producer = worker(judge=judge), asyncio.Event(), FencedProducer(during)
    w.assignment.assigned = {TP}
    w.assignment.member = Member(1, "test-member")  # as an assignment sets it
    consumer = ScriptedConsumer([batch([1.0], start=100)], stop)
    with pytest.raises(ProducerFenced) as fenced_by:
        await asyncio.wait_for(w.pipeline(stop, consumer, producer, sender_for(producer)), 5)  # type: ignore[arg-type]
    assert producer.log == ["begin", "offsets 101", "abort"]
    first.up = second.up = False  # the session closes every connection on its way out
    fencing = judge.judge(fenced_by.value)
    assert fencing is not None and fencing.transaction_age_s == 0.0  # the clock stood still
    assert (fencing.connection_lost, fencing.rival) == (outage != "none", outage == "none")

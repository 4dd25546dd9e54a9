"""A transaction's first AddPartitionsToTxn, refused while the previous transaction's
markers are written, is asked again after ``RETRY_S`` instead of aiokafka's 20 ms; every
other answer is handled as aiokafka does. The broker's side: bench/latency.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import ConcurrentTransactions, CoordinatorLoadInProgressError, NoError
from privstream.worker import txn_start
from privstream.worker.generation_fence import fence

TP = TopicPartition("out", 0)
DEFAULT_BACKOFF_S = 0.1  # aiokafka's retry_backoff_ms, which the worker does not change


class _Txn:
    """The parts of aiokafka's transaction manager the handler touches."""

    transactional_id, producer_id, producer_epoch = "t", 1, 0

    def __init__(self, holds: set[TopicPartition]) -> None:
        self.txn_partitions = set(holds)

    def partition_added(self, tp: TopicPartition) -> None:
        self.txn_partitions.add(tp)


def answer(
    code: int, holds: set[TopicPartition] = frozenset(), sender: Any = None
) -> tuple[float | None, _Txn]:
    txn = _Txn(set(holds))
    if sender is None:
        sender = SimpleNamespace(refused_in_a_row=0, _retry_backoff=DEFAULT_BACKOFF_S)
    sender._txn_manager = txn
    handler = txn_start.QuickStartHandler(sender, [TP])
    return handler.handle_response(SimpleNamespace(errors=[("out", [(0, code)])])), txn


def test_a_first_add_refused_while_the_previous_commit_completes_is_retried_sooner() -> None:
    backoff, txn = answer(ConcurrentTransactions.errno)
    assert backoff == txn_start.RETRY_S < 0.02  # aiokafka's BACKOFF_OVERRIDE
    assert txn.txn_partitions == set()  # not added: asked again


def test_the_wait_doubles_with_each_refusal_up_to_aiokafkas_and_resets_once_added() -> None:
    sender = SimpleNamespace(refused_in_a_row=0, _retry_backoff=DEFAULT_BACKOFF_S)
    waits = [answer(ConcurrentTransactions.errno, sender=sender)[0] for _ in range(6)]
    assert waits == pytest.approx([0.002, 0.004, 0.008, 0.016, 0.02, 0.02])
    assert answer(NoError.errno, sender=sender)[0] is None
    assert answer(ConcurrentTransactions.errno, sender=sender)[0] == txn_start.RETRY_S


def test_a_later_add_refused_keeps_aiokafkas_backoff() -> None:
    """A transaction that already holds partitions is not waiting for the previous one."""
    backoff, _ = answer(ConcurrentTransactions.errno, holds={TopicPartition("out", 1)})
    assert backoff == DEFAULT_BACKOFF_S


@pytest.mark.parametrize(
    ("code", "expected"),
    [(NoError.errno, None), (CoordinatorLoadInProgressError.errno, DEFAULT_BACKOFF_S)],
)
def test_other_answers_are_aiokafkas(code: int, expected: float | None) -> None:
    backoff, txn = answer(code)
    assert backoff == expected
    assert (TP in txn.txn_partitions) == (code == NoError.errno)


async def test_a_fenced_producer_adds_partitions_through_the_quick_handler() -> None:
    producer = AIOKafkaProducer(transactional_id="t", enable_idempotence=True)
    fence(producer)
    assert producer._sender.refused_in_a_row == 0  # the class default: no refusal yet
    sent: list[Any] = []

    async def coordinator(*_: Any) -> int:
        return 0

    async def do(self: Any, node_id: int) -> bool:
        sent.append(type(self))
        return True

    sender: Any = producer._sender
    sender._find_coordinator = coordinator
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(txn_start.QuickStartHandler, "do", do)
        assert await sender._do_add_partitions_to_txn({TP}) is True
    assert sent == [txn_start.QuickStartHandler]
    await producer.stop()

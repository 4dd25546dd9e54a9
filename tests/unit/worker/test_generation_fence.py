"""The offset commit a fenced producer sends (TxnOffsetCommit v3 with the member and its
generation) and what it does with the coordinator's answers. The broker's side is in
tests/integration/test_frozen_worker.py."""

from __future__ import annotations

from io import BytesIO
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import IllegalGenerationError, UnknownMemberIdError
from aiokafka.producer.sender import Sender
from aiokafka.structs import OffsetAndMetadata
from privstream.errors import BrokerError
from privstream.worker import generation_fence
from privstream.worker.generation_fence import (
    GenerationTxnOffsetCommit,
    GroupId,
    Member,
    fence,
    is_stale_member,
    member_of,
)

MEMBER = Member(generation_id=7, member_id="privstream-abc")


def test_the_request_is_v3_and_names_the_member_and_generation() -> None:
    request = GenerationTxnOffsetCommit(
        "txn-a", GroupId("group", MEMBER), 42, 3, MEMBER, {"raw": [(1, 100, ""), (0, 5, "m")]}
    )
    struct = request.prepare({28: (0, 3)})
    assert struct.API_VERSION == 3 and struct.FLEXIBLE_VERSION
    decoded = type(struct).SCHEMA.decode(BytesIO(struct.encode()))
    head, topics = decoded[:7], decoded[7]
    assert head == ("txn-a", "group", 42, 3, 7, "privstream-abc", None)
    assert topics == [("raw", [(1, 100, -1, "", {}), (0, 5, -1, "m", {})], {})]


async def test_a_broker_without_v3_stops_the_worker_with_a_message() -> None:
    """aiokafka cannot build the request for a broker older than Kafka 2.5: the producer's
    transaction fails for good (BrokerError, not retried) instead of committing unfenced."""
    request = GenerationTxnOffsetCommit("t", "g", 1, 0, MEMBER, {"raw": [(0, 1, "")]})
    with pytest.raises(NotImplementedError):
        request.prepare({28: (0, 2)})
    h, txn = handler({TopicPartition("raw", 0): 1})

    async def send(node_id: int, req: Any, group: Any = None) -> Any:
        return req.prepare({28: (0, 2)})

    h._sender.client = type("Client", (), {"send": staticmethod(send)})()
    assert await h.do(0) is True  # handled: no retry
    [fatal] = txn.fatal
    assert isinstance(fatal, BrokerError) and "TxnOffsetCommit v3" in str(fatal)


class _Txn:
    """The parts of aiokafka's transaction manager the handler touches."""

    def __init__(self) -> None:
        self.transactional_id, self.producer_id, self.producer_epoch = "t", 1, 0
        self.errors: list[BaseException] = []
        self.fatal: list[BaseException] = []
        self.committed: list[tuple[TopicPartition, int]] = []

    def error_transaction(self, exc: BaseException) -> None:
        self.errors.append(exc)

    def fatal_error(self, exc: BaseException) -> None:
        self.fatal.append(exc)

    def wait_for_transaction_end(self) -> Any:
        class _Done:
            def exception(self) -> None:
                return None

        return _Done()

    def offset_committed(self, tp: TopicPartition, offset: int, group_id: str) -> None:
        self.committed.append((tp, offset))


class _Sender:
    def __init__(self) -> None:
        self._txn_manager = _Txn()
        self._retry_backoff = 0.1


def handler(offsets: dict[TopicPartition, int]) -> tuple[Any, _Txn]:
    sender = _Sender()
    meta = {tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()}
    return generation_fence._Handler(sender, meta, GroupId("group", MEMBER)), sender._txn_manager


def response(code: int) -> Any:
    struct = generation_fence._ResponseV3(0, [("raw", [(0, code, {}), (1, code, {})], {})], {})
    return generation_fence._ResponseV3.decode(BytesIO(struct.encode()))


@pytest.mark.parametrize("code", sorted(generation_fence.STALE_MEMBER))
def test_a_stale_member_makes_the_transaction_abortable(code: int) -> None:
    """No retry, no offset recorded: the worker's commit raises and it aborts."""
    tps = {TopicPartition("raw", 0): 10, TopicPartition("raw", 1): 20}
    h, txn = handler(tps)
    assert h.handle_response(response(code)) is None
    [error] = txn.errors
    assert getattr(error, "errno", None) == code
    assert "generation 7" in str(error) and "privstream-abc" in str(error)
    assert txn.committed == []
    assert is_stale_member(error)


def test_an_accepted_commit_records_every_offset() -> None:
    tps = {TopicPartition("raw", 0): 10, TopicPartition("raw", 1): 20}
    h, txn = handler(tps)
    assert h.handle_response(response(0)) is None
    assert txn.errors == [] and sorted(txn.committed) == sorted(tps.items())


def test_a_plain_group_id_is_never_sent_unfenced() -> None:
    sender = _Sender()
    h = generation_fence._Handler(sender, {TopicPartition("raw", 0): OffsetAndMetadata(1, "")}, "g")
    with pytest.raises(BrokerError):
        h.create_request()


async def test_fence_swaps_the_sender_of_a_transactional_producer() -> None:
    producer = AIOKafkaProducer(transactional_id="t", enable_idempotence=True)
    assert type(producer._sender) is Sender
    fence(producer)
    assert isinstance(producer._sender, Sender) and type(producer._sender) is not Sender
    await producer.stop()


def test_fence_refuses_a_producer_it_does_not_know() -> None:
    class Other:
        _sender = object()

    with pytest.raises(BrokerError, match="zombie fencing"):
        fence(Other())  # type: ignore[arg-type]


def test_stale_member_errors_are_told_apart_from_others() -> None:
    assert is_stale_member(IllegalGenerationError())
    wrapped = RuntimeError("outer")
    wrapped.__cause__ = UnknownMemberIdError()
    assert is_stale_member(wrapped)
    assert not is_stale_member(OSError(22, "EINVAL shares the number, not the meaning"))
    assert not is_stale_member(None)


def test_the_member_is_read_from_the_consumer_or_the_worker_refuses_to_start() -> None:
    consumer = SimpleNamespace(_coordinator=SimpleNamespace(generation=3, member_id="m-1"))
    assert member_of(consumer) == Member(3, "m-1")  # type: ignore[arg-type]
    with pytest.raises(BrokerError, match="generation"):
        member_of(SimpleNamespace())  # type: ignore[arg-type]

"""Zombie fencing by the group generation (KIP-447) on aiokafka's transactional producer.

aiokafka 0.14 commits a transaction's offsets with ``TxnOffsetCommit`` v0,
which names neither the group member nor its generation: the coordinator
accepts it from anyone. A worker frozen past ``session_timeout_ms`` (a GC
pause, a frozen VM) loses its partitions, and when it wakes it could still
commit the batch it held, outputs and ledger records included, after the new
owner restored that partition's ledger (issue 30). Here the producer's
offset commit is ``TxnOffsetCommit`` v3 (Kafka 2.5+) with the generation and
member id under which the batch's partitions were assigned; the coordinator
refuses it (``ILLEGAL_GENERATION``, ``UNKNOWN_MEMBER_ID``) once the group has
moved on, the transaction becomes abortable, and the worker aborts it: its
outputs, changelog records and offsets never commit.

One swap of a private class (``AIOKafkaProducer._sender``'s): an aiokafka
without it refuses to start rather than run unfenced (``fence``).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, TypeAlias

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    IncompatibleBrokerVersion,
    KafkaError,
    for_code,
)

from privstream.errors import BrokerError
from privstream.kafka.compat import (
    CompactArray,
    CompactString,
    CoordinationType,
    Int16,
    Int32,
    Int64,
    Request,
    RequestStruct,
    Response,
    Schema,
    Sender,
    TaggedFields,
    TxnOffsetCommitHandler,
)
from privstream.worker.txn_start import QuickStartSender

#: what the coordinator answers a member no longer in the current generation:
#: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID (FENCED_INSTANCE_ID needs static membership: unused)
STALE_MEMBER = frozenset({22, 25})


@dataclass(frozen=True)
class Member:
    """Who commits: the consumer's group member id and generation at an assignment."""

    generation_id: int
    member_id: str


class GroupId(str):
    """A group id that carries the member it commits as (aiokafka passes the group id
    through to the offset commit unchanged; a plain ``str`` elsewhere)."""

    member: Member

    def __new__(cls, group_id: str, member: Member) -> GroupId:
        made = super().__new__(cls, group_id)
        made.member = member
        return made


def member_of(consumer: AIOKafkaConsumer) -> Member:
    """The consumer's current generation and member id (aiokafka's private coordinator)."""
    coordinator = getattr(consumer, "_coordinator", None)
    generation = getattr(coordinator, "generation", None)
    member_id = getattr(coordinator, "member_id", None)
    if not isinstance(generation, int) or not isinstance(member_id, str):
        raise BrokerError(
            "this aiokafka does not expose the consumer group's generation "
            "(AIOKafkaConsumer._coordinator.generation): zombie fencing needs it; install "
            "the aiokafka version pinned in pyproject.toml"
        )
    return Member(generation, member_id)


def fence(producer: AIOKafkaProducer) -> None:
    """Make ``producer`` commit transactional offsets with the group generation (v3), and
    begin each transaction without aiokafka's 20 ms wait (``txn_start``)."""
    sender = getattr(producer, "_sender", None)
    if type(sender) is not Sender or not hasattr(sender, "_do_txn_offset_commit"):
        raise BrokerError(
            "this aiokafka's producer has no Sender._do_txn_offset_commit: without it a "
            "worker that lost its partitions could still commit them (no zombie fencing); "
            "install the aiokafka version pinned in pyproject.toml"
        )
    sender.__class__ = _FencingSender


class _FencingSender(QuickStartSender):
    """aiokafka's sender, its offset commit sent as v3 (aiokafka's method otherwise)."""

    async def _do_txn_offset_commit(self, offsets: Any, group_id: str) -> None:
        if not offsets:
            return
        try:  # to the group's coordinator, not the transaction's (as aiokafka does)
            node_id = await self._find_coordinator(CoordinationType.GROUP, group_id)
        except GroupAuthorizationFailedError as exc:
            self._txn_manager.error_transaction(exc)
            return
        await _Handler(self, offsets, group_id).do(node_id)


class _Handler(TxnOffsetCommitHandler):  # type: ignore[misc]
    def create_request(self) -> GenerationTxnOffsetCommit:
        member = getattr(self._group_id, "member", None)
        if member is None:  # a caller that passed a plain group id: never unfenced
            raise BrokerError("transactional offset commit without the group generation")
        txn = self._sender._txn_manager
        by_topic: dict[str, list[tuple[int, int, str]]] = collections.defaultdict(list)
        for tp, offset in sorted(self._offsets.items()):
            by_topic[tp.topic].append((tp.partition, offset.offset, offset.metadata))
        return GenerationTxnOffsetCommit(
            txn.transactional_id,
            self._group_id,
            txn.producer_id,
            txn.producer_epoch,
            member,
            by_topic,
        )

    async def do(self, node_id: int) -> bool:
        try:
            done: bool = await super().do(node_id)
        except (IncompatibleBrokerVersion, NotImplementedError):  # aiokafka raises either
            self._sender._txn_manager.fatal_error(
                BrokerError(
                    "the broker does not accept TxnOffsetCommit v3 (Kafka 2.5 or later): "
                    "without the group generation a worker that lost its partitions could "
                    "still commit them; upgrade the brokers to Kafka 2.5 or later"
                )
            )
            return True
        return done

    def handle_response(self, resp: _ResponseV3) -> float | None:
        """A stale member aborts the transaction; any other answer is aiokafka's to handle."""
        errors = [
            (name, [(index, code) for index, code, _tags in parts])
            for name, parts, _tags in resp.topics
        ]
        stale = {code for _name, parts in errors for _index, code in parts if code in STALE_MEMBER}
        if stale:
            member = self._group_id.member
            code = min(stale)
            txn = self._sender._txn_manager
            txn.error_transaction(
                for_code(code)(
                    f"group {str(self._group_id)!r} refused this worker's transactional offset "
                    f"commit as generation {member.generation_id} (member "
                    f"{member.member_id!r}): the group moved on while the worker stalled, and "
                    "the partitions belong to another worker now; the batch is aborted"
                )
            )
            # the caller gets the error from its offset commit; aiokafka's transaction waiter
            # holds it too and would log it as never retrieved
            txn.wait_for_transaction_end().exception()
            return None
        answer: float | None = super().handle_response(_Errors(errors))
        return answer


@dataclass(frozen=True)
class _Errors:
    """The v0 response's shape, for aiokafka's own handling of every other answer."""

    errors: list[tuple[str, list[tuple[int, int]]]]


class _ResponseV3(Response):  # type: ignore[misc]
    API_KEY = 28
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("error_code", Int16),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class _RequestV3(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 28
    API_VERSION = 3
    RESPONSE_TYPE = _ResponseV3
    SCHEMA = Schema(
        ("transactional_id", CompactString("utf-8")),
        ("group_id", CompactString("utf-8")),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("generation_id", Int32),
        ("member_id", CompactString("utf-8")),
        ("group_instance_id", CompactString("utf-8")),  # nullable: None
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("committed_metadata", CompactString("utf-8")),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


_Struct: TypeAlias = _RequestV3
#: "no leader epoch known" (aiokafka does not track them)
_NO_EPOCH = -1


class GenerationTxnOffsetCommit(Request[_Struct]):  # type: ignore[misc]
    """TxnOffsetCommit v3: the offsets, as the member of one generation (KIP-447)."""

    API_KEY = 28

    def __init__(
        self,
        transactional_id: str,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member: Member,
        by_topic: dict[str, list[tuple[int, int, str]]],
    ) -> None:
        self._head = (transactional_id, str(group_id), producer_id, producer_epoch)
        self._member = member
        self._topics: list[
            tuple[str, list[tuple[int, int, int, str, dict[int, bytes]]], dict[int, bytes]]
        ] = [
            (topic, [(p, offset, _NO_EPOCH, meta, {}) for p, offset, meta in parts], {})
            for topic, parts in sorted(by_topic.items())
        ]

    def build(self, request_struct_class: type[_Struct]) -> _Struct:
        member = self._member
        return request_struct_class(
            *self._head, member.generation_id, member.member_id, None, self._topics, {}
        )


def is_stale_member(exc: BaseException | None) -> bool:
    """``exc``, or one in its cause chain, is the coordinator refusing a stale member."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KafkaError) and getattr(exc, "errno", None) in STALE_MEMBER:
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False

"""Committed offsets read with ``require_stable`` (KIP-447), where aiokafka reads them without.

A batch's consumed offsets commit in its transaction: the group coordinator
holds them as pending until the commit marker reaches ``__consumer_offsets``,
a few milliseconds after the producer's commit returned. aiokafka asks for
committed offsets with OffsetFetch v0-v3, which answer with the offset from
before a pending commit. A new owner that asks in that gap starts one batch
early and releases that batch a second time (byte for byte the first, the
noise being bound to the record, but a duplicate all the same; with the
ledger on, it is charged twice). OffsetFetch v7 with ``require_stable``
answers ``UNSTABLE_OFFSET_COMMIT`` instead while a commit is pending; this
module asks that way, waits the pending commit out, and the worker seeks its
new partitions to the answer (``rebalance.Rebalance``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import TypeAlias

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    GroupCoordinatorNotAvailableError,
    GroupLoadInProgressError,
    KafkaConnectionError,
    NodeNotReadyError,
    NotCoordinatorForGroupError,
    RequestTimedOutError,
    for_code,
)

from privstream.kafka.compat import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Request,
    RequestStruct,
    Response,
    Schema,
    TaggedFields,
)

log = logging.getLogger("privstream.worker")

#: Kafka's error code while a transactional offset commit is pending (KIP-447)
UNSTABLE_OFFSET_COMMIT = 88
#: how often a pending commit is asked about again
RECHECK_S = 0.02
#: what a coordinator moving or loading answers (a broker restart, a failover): asked
#: again until the deadline, as aiokafka's own reading does, rather than falling back to
#: that reading, which is the one that may predate a pending commit
_TRANSIENT = (
    GroupCoordinatorNotAvailableError,
    GroupLoadInProgressError,
    NotCoordinatorForGroupError,
    KafkaConnectionError,
    NodeNotReadyError,
    RequestTimedOutError,
)
#: the pause before asking again after such an answer
TRANSIENT_BACKOFF_S = 0.1


class _OffsetFetchResponseV7(Response):  # type: ignore[misc]
    API_KEY = 9
    API_VERSION = 7
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
                        ("committed_offset", Int64),
                        ("committed_leader_epoch", Int32),
                        ("metadata", CompactString("utf-8")),
                        ("error_code", Int16),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("error_code", Int16),
        ("tags", TaggedFields),
    )


class _OffsetFetchRequestV7(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 9
    API_VERSION = 7
    RESPONSE_TYPE = _OffsetFetchResponseV7
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("partition_indexes", CompactArray(Int32)),
                ("tags", TaggedFields),
            ),
        ),
        ("require_stable", Boolean),
        ("tags", TaggedFields),
    )


_Struct: TypeAlias = _OffsetFetchRequestV7


class StableOffsetFetch(Request[_Struct]):  # type: ignore[misc]
    """OffsetFetch v7, ``require_stable`` set (a broker without v7 cannot be asked)."""

    API_KEY = 9

    def __init__(self, group: str, tps: list[TopicPartition]) -> None:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp.partition)
        self._group = group
        self._topics: list[tuple[str, list[int], dict[int, bytes]]] = [
            (topic, parts, {}) for topic, parts in sorted(by_topic.items())
        ]

    def build(self, request_struct_class: type[_Struct]) -> _Struct:
        return request_struct_class(self._group, self._topics, True, {})


async def stable_committed(
    admin: AIOKafkaAdminClient, group: str, tps: list[TopicPartition], *, within_s: float
) -> dict[TopicPartition, int | None]:
    """Each partition's committed offset once no transactional commit of it is pending
    (None: the group never committed it). A coordinator moving or loading is asked
    again (``_TRANSIENT``). Raises ``TimeoutError`` past ``within_s`` and the broker's
    error for anything else."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        try:
            pending, offsets = _parse(await _fetch(admin, group, tps))
        except _TRANSIENT as exc:
            if loop.time() > deadline:
                raise TimeoutError(f"group coordinator of {group}: {exc!r}") from exc
            await asyncio.sleep(TRANSIENT_BACKOFF_S)
            continue
        if not pending:
            return {tp: offsets.get(tp) for tp in tps}
        if loop.time() > deadline:
            raise TimeoutError(f"offset commits of {sorted(pending)} still pending")
        await asyncio.sleep(RECHECK_S)


async def _fetch(
    admin: AIOKafkaAdminClient, group: str, tps: list[TopicPartition]
) -> _OffsetFetchResponseV7:
    """One OffsetFetch v7 to the group's coordinator, found again each time (it moves)."""
    coordinator = await admin.find_coordinator(group)
    response: _OffsetFetchResponseV7 = await admin._send_request_to_node(  # private: no
        coordinator,
        StableOffsetFetch(group, tps),  # public OffsetFetch v7
    )
    return response


def _parse(
    response: _OffsetFetchResponseV7,
) -> tuple[set[TopicPartition], dict[TopicPartition, int]]:
    """(partitions with a pending commit, committed offsets; -1 is none)."""
    if response.error_code:
        raise for_code(response.error_code)(f"fetching committed offsets: {response.error_code}")
    pending: set[TopicPartition] = set()
    offsets: dict[TopicPartition, int] = {}
    for name, partitions, _tags in response.topics:
        for index, offset, _epoch, _metadata, code, _ptags in partitions:
            tp = TopicPartition(name, index)
            if code == UNSTABLE_OFFSET_COMMIT:
                pending.add(tp)
            elif code:
                raise for_code(code)(f"fetching the committed offset of {tp}")
            elif offset >= 0:
                offsets[tp] = offset
    return pending, offsets

"""``stable_committed``'s answers to what a group coordinator may say (the wire format and
a pending commit on a real broker: tests/integration/test_stable_offsets.py)."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import GroupAuthorizationFailedError
from privstream.worker import stable_offsets
from privstream.worker.stable_offsets import (
    UNSTABLE_OFFSET_COMMIT,
    StableOffsetFetch,
    _OffsetFetchResponseV7,
    stable_committed,
)

TPS = [TopicPartition("raw", 0), TopicPartition("raw", 1)]
#: Kafka's error codes (org.apache.kafka.common.protocol.Errors)
COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, GROUP_AUTHORIZATION_FAILED = 14, 16, 30


def answer(top: int = 0, codes: tuple[int, int] = (0, 0)) -> _OffsetFetchResponseV7:
    """An OffsetFetch v7 response: partition 0 committed at 7, partition 1 never."""
    partitions = [(0, 7, -1, "", codes[0], {}), (1, -1, -1, "", codes[1], {})]
    return _OffsetFetchResponseV7(0, [("raw", partitions, {})], top, {})


class Coordinator:
    """Answers each OffsetFetch with the next scripted response; counts the lookups."""

    def __init__(self, *responses: _OffsetFetchResponseV7) -> None:
        self._responses = list(responses)
        self.lookups = 0

    async def find_coordinator(self, group: str) -> int:
        self.lookups += 1
        return self.lookups  # a coordinator that moves: a new node each time

    async def _send_request_to_node(self, node: int, request: Any) -> _OffsetFetchResponseV7:
        assert isinstance(request, StableOffsetFetch)
        return self._responses.pop(0)


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stable_offsets, "RECHECK_S", 0)
    monkeypatch.setattr(stable_offsets, "TRANSIENT_BACKOFF_S", 0, raising=False)


async def test_a_coordinator_loading_or_moved_is_asked_again_not_given_up_on() -> None:
    """What a coordinator answers while it loads or after it moved (a broker restart, a
    failover): these made the worker fall back at once to aiokafka's reading, the one that
    may predate a pending commit."""
    admin = Coordinator(
        answer(top=COORDINATOR_LOAD_IN_PROGRESS),
        answer(top=NOT_COORDINATOR),
        answer(codes=(UNSTABLE_OFFSET_COMMIT, 0)),
        answer(),
    )
    got = await stable_committed(admin, "g", TPS, within_s=30)  # type: ignore[arg-type]
    assert got == {TPS[0]: 7, TPS[1]: None}
    assert admin.lookups == 4  # the coordinator looked up again each time


async def test_a_coordinator_that_stays_unavailable_ends_in_timeout_error() -> None:
    admin = Coordinator(*[answer(top=COORDINATOR_LOAD_IN_PROGRESS)] * 3)
    with pytest.raises(TimeoutError, match="coordinator"):
        await stable_committed(admin, "g", TPS, within_s=0)  # type: ignore[arg-type]


async def test_an_error_that_asking_again_cannot_fix_is_raised() -> None:
    admin = Coordinator(answer(top=GROUP_AUTHORIZATION_FAILED))
    with pytest.raises(GroupAuthorizationFailedError):
        await stable_committed(admin, "g", TPS, within_s=30)  # type: ignore[arg-type]

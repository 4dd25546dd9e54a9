"""Helpers for the fault-injection tests (kill -9, rebalance): watch topics, feed them.

* ``Tail`` reads a topic from its beginning while a test runs, with either
  isolation level: ``read_uncommitted`` also shows the records of aborted
  transactions (the copies a killed worker wrote), which is how the tests see
  that a replayed batch was byte-identical.
* ``read_to_end`` is a one-shot read of a topic up to its end offsets at call
  time, with either isolation level.
* ``stream`` produces messages chunk by chunk, each chunk gated by a callback
  (back-pressure on an observable event, not a timer), and returns every
  message's (partition, offset).
* ``metric`` scrapes one sample of a worker's /metrics.
* ``group_assignment`` asks the broker how a consumer group's partitions are
  shared among its members.

Every wait has a deadline and fails with an AssertionError that says what it
waited for and what it saw.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Hashable, Sequence

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import KafkaError
from prometheus_client.parser import text_string_to_metric_families

from tests.http_get import http_get
from tests.integration.worker_proc import Message


class Tail:
    """Reads ``topic`` from the beginning into ``records`` until the context exits.

    ``identity`` (optional) names a record, e.g. its ``seq``; ``distinct`` is
    then the set of names seen so far. Waiters are woken after every fetch.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        isolation_level: str = "read_committed",
        identity: Callable[[ConsumerRecord], Hashable] | None = None,
    ) -> None:
        self.topic = topic
        self.isolation_level = isolation_level
        self.records: list[ConsumerRecord] = []
        self.distinct: set[Hashable] = set()
        self._identity = identity
        self._consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            isolation_level=isolation_level,
            enable_auto_commit=False,
            fetch_max_wait_ms=25,  # see new records within a few ms (kill timing relies on it)
        )
        self._grew = asyncio.Condition()

    async def __aenter__(self) -> Tail:
        await self._consumer.start()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self._consumer.stop()

    async def _run(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=200)
            new = [m for msgs in batches.values() for m in msgs]
            if new:
                async with self._grew:
                    self.records.extend(new)
                    if self._identity is not None:
                        self.distinct.update(self._identity(m) for m in new)
                    self._grew.notify_all()

    async def wait_until(self, done: Callable[[], bool], within_s: float, what: str) -> None:
        """Wait until ``done()`` holds (checked after every fetch) or fail after ``within_s``."""
        async with self._grew:
            try:
                await asyncio.wait_for(self._grew.wait_for(done), within_s)
            except TimeoutError:
                raise AssertionError(
                    f"{self.topic} ({self.isolation_level}): not {what} after {within_s}s; "
                    f"{len(self.records)} records, {len(self.distinct)} distinct"
                ) from None

    async def wait_distinct(self, count: int, within_s: float) -> None:
        await self.wait_until(
            lambda: len(self.distinct) >= count, within_s, f"{count} distinct records"
        )


async def read_to_end(
    bootstrap: str, topic: str, partitions: int, *, isolation_level: str, within_s: float = 60
) -> list[ConsumerRecord]:
    """Every record of ``topic`` up to its end offsets at call time.

    With ``read_uncommitted`` the end is the high watermark and aborted records
    are included; with ``read_committed`` it is the last stable offset.
    """
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation_level, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        out: list[ConsumerRecord] = []

        async def drain() -> None:
            while [tp for tp in tps if await consumer.position(tp) < end[tp]]:
                batches = await consumer.getmany(*tps, timeout_ms=500)
                out.extend(m for msgs in batches.values() for m in msgs)

        await asyncio.wait_for(drain(), within_s)
        return out
    finally:
        await consumer.stop()


async def stream(
    bootstrap: str,
    topic: str,
    messages: Sequence[Message],
    *,
    chunk: int,
    before_chunk: Callable[[int], Awaitable[None]],
) -> list[tuple[int, int]]:
    """Produce ``messages`` in chunks; ``await before_chunk(i)`` gates the chunk starting at i.

    Each chunk is acknowledged (acks=all) before the next one is gated, so a
    gate that waits for output of earlier inputs never waits for unsent ones.
    Returns each message's (partition, offset), in order.
    """
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks="all")
    await producer.start()
    coords: list[tuple[int, int]] = []
    try:
        for start in range(0, len(messages), chunk):
            await before_chunk(start)
            pending = [
                await producer.send(topic, value, key=key, headers=headers)
                for key, value, headers in messages[start : start + chunk]
            ]
            coords.extend((m.partition, m.offset) for m in await asyncio.gather(*pending))
        return coords
    finally:
        await producer.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def metric(port: int, name: str) -> float | None:
    """The value of the unlabelled sample ``name`` on the worker's /metrics;
    None while the endpoint is not up or the sample is absent."""
    try:
        status, text = await http_get(port, "/metrics")
    except OSError:  # not listening yet
        return None
    assert status == 200, text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and not sample.labels:
                return sample.value
    return None


async def poll_until(
    probe: Callable[[], Awaitable[bool]], within_s: float, what: str, every_s: float = 0.05
) -> None:
    """Call ``probe`` every ``every_s`` (a polling interval, not a synchronisation guess)
    until it returns True; fail after ``within_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not await probe():
        if loop.time() > deadline:
            raise AssertionError(f"not {what} after {within_s}s")
        await asyncio.sleep(every_s)


async def group_assignment(bootstrap: str, group_id: str) -> tuple[str, list[list[int]]]:
    """The group's state (e.g. ``Stable``) and each member's assigned partitions.

    ``("", [])`` while the broker cannot tell yet (e.g. no group coordinator
    on a fresh broker: a retriable error).
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [response] = await admin.describe_consumer_groups([group_id])
    except KafkaError as exc:
        if not exc.retriable:
            raise
        return "", []
    finally:
        await admin.close()
    [group] = response.groups
    # (error_code, group, state, protocol_type, protocol, members, ...); a member's
    # assignment is its last field in every version of the response
    state, members = group[2], group[5]
    shares = []
    for member in members:
        assignment = ConsumerProtocolMemberAssignment.decode(member[-1]) if member[-1] else None
        shares.append(sorted(tp.partition for tp in assignment.partitions()) if assignment else [])
    return str(state), shares

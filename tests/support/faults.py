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
* ``metric`` scrapes one sample of a worker's /metrics, ``scrape_until`` polls
  all of them until a condition holds.
* ``fault_topics``, ``is_bad``, ``good_before``, ``seq_of``, ``source_of``,
  ``assert_each_once`` and ``assert_dead_once``: the input convention (every
  100th input malformed) and the exactly-once checks of the kill -9 and
  rebalance tests.
* ``group_assignment`` asks the broker how a consumer group's partitions are
  shared among its members.

Every wait has a deadline and fails with an AssertionError that says what it
waited for and what it saw.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import TypeVar

from aiokafka import AIOKafkaProducer, ConsumerRecord
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import KafkaError
from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker import create_topics
from tests.support.http_get import http_get
from tests.support.worker_proc import (
    Collector,
    Message,
    WorkerProcess,
    read_partitions,
    unique_topics,
)

T = TypeVar("T")


class Tail(Collector):
    """A ``Collector`` that sees new records within a few ms, with either isolation level.

    ``identity`` (optional) names a record, e.g. its ``seq``; ``distinct`` is
    then the set of names seen so far. Tails given the same ``wakes`` condition
    wake each other's waiters, so one ``wait_until`` can watch several topics.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        isolation_level: str = "read_committed",
        identity: Callable[[ConsumerRecord], Hashable] | None = None,
        wakes: asyncio.Condition | None = None,
    ) -> None:
        # fetch_max_wait_ms: see new records within a few ms (kill timing relies on it)
        super().__init__(bootstrap, topic, isolation_level=isolation_level, fetch_max_wait_ms=25)
        self.distinct: set[Hashable] = set()
        self._identity = identity
        if wakes is not None:
            self._grew = wakes

    def _add(self, new: list[ConsumerRecord]) -> None:
        super()._add(new)
        if self._identity is not None:
            self.distinct.update(self._identity(m) for m in new)

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
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    isolation_level: str,
    within_s: float | None = 60,
) -> list[ConsumerRecord]:
    """Every record of ``topic`` up to its end offsets at call time.

    With ``read_uncommitted`` the end is the high watermark and aborted records
    are included; with ``read_committed`` it is the last stable offset.
    """
    return await read_partitions(bootstrap, topic, partitions, isolation_level, within_s)


async def fault_topics(bootstrap: str, prefix: str) -> dict[str, str]:
    """``unique_topics(prefix)``, created: input and output with 4 partitions, dead letters 2."""
    kafka = unique_topics(prefix)
    await create_topics(bootstrap, [kafka["input_topic"], kafka["output_topic"]], partitions=4)
    await create_topics(bootstrap, [kafka["dead_letter_topic"]], partitions=2)
    return kafka


def is_bad(i: int) -> bool:
    """Input i of a fault test is malformed (every 100th one)."""
    return i % 100 == 99


def telemetry_message(i: int, canary: str) -> Message:
    """Input i of a fault test: key, value and a header, each carrying ``canary`` (so a
    test can check no raw byte reaches a log); malformed JSON when ``is_bad(i)``."""
    if is_bad(i):
        value = f'{{"seq": {i}, "device_id": "{canary}-BAD-{i}", oops'.encode()
    else:
        value = json.dumps(
            {
                "device_id": f"{canary}-DEVICE-{i}",
                "seq": i,
                "salary": 1504 + (i % 2996) + 0.2109375,
                "state": ("TX", "CA", "NY")[i % 3],
                "opted_in": i % 2 == 0,
            }
        ).encode()
    return (f"{canary}-KEY-{i}".encode(), value, [("trace", f"{canary}-HEADER-{i}".encode())])


def good_before(total: int) -> list[int]:
    """``good_before(total)[i]``: how many of the first i inputs are good."""
    counts = [0]
    for i in range(total):
        counts.append(counts[-1] + (not is_bad(i)))
    return counts


def seq_of(record: ConsumerRecord) -> int:
    return int(json.loads(record.value)["seq"])


def source_of(record: ConsumerRecord) -> str:
    return str(dict(record.headers)["privstream-source"].decode())


def assert_each_once(
    sanitized: list[ConsumerRecord],
    good_seqs: set[int],
    expected: list[bytes | None],
    summary: str,
    seq: Callable[[ConsumerRecord], int] = seq_of,
) -> None:
    """Every good seq committed exactly once, byte-identical to ``expected`` (the replay);
    ``seq`` reads a record's seq (default: from its JSON)."""
    counts = Counter(seq(r) for r in sanitized)
    duplicated = sorted(s for s, c in counts.items() if c > 1)
    missing = sorted(good_seqs - counts.keys())
    assert not duplicated, f"duplicated seqs {duplicated[:20]} ({len(duplicated)}); {summary}"
    assert not missing, f"missing seqs {missing[:20]} ({len(missing)}); {summary}"
    assert counts.keys() == good_seqs, summary
    differ = [seq(r) for r in sanitized if r.value != expected[seq(r)]]
    assert not differ, f"committed bytes differ from replay for seqs {differ[:20]}; {summary}"


def assert_dead_once(
    dead_letters: list[ConsumerRecord], topic: str, coords: list[tuple[int, int]], summary: str
) -> dict[str, int]:
    """Every bad input dead-lettered exactly once (by its source header);
    returns each input's index by its source (``topic/partition/offset``)."""
    index_of = {f"{topic}/{p}/{o}": i for i, (p, o) in enumerate(coords)}
    dead_counts = Counter(source_of(r) for r in dead_letters)
    assert not [s for s, c in dead_counts.items() if c > 1], f"duplicate dead letters; {summary}"
    assert dead_counts.keys() == {s for s, i in index_of.items() if is_bad(i)}, summary
    return index_of


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


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """A /metrics text as {(name, sorted labels): value}."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def metric(port: int, name: str) -> float | None:
    """The value of the unlabelled sample ``name`` on the worker's /metrics;
    None while the endpoint is not up or the sample is absent."""
    try:
        status, text = await http_get(port, "/metrics")
    except OSError:  # not listening yet
        return None
    assert status == 200, text
    return samples(text).get((name, ()))


async def scrape_until(
    port: int, done: Callable[[Samples], bool], within_s: float = 30, every_s: float = 0.05
) -> Samples:
    """Poll /metrics every ``every_s`` (a polling interval, not a synchronisation guess)
    until ``done`` holds or the deadline passes; return the last scrape."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        status, text = await http_get(port, "/metrics")
        assert status == 200
        got = samples(text)
        if done(got) or loop.time() > deadline:
            return got
        await asyncio.sleep(every_s)


async def poll_until(
    probe: Callable[[], Awaitable[T | bool | None]],
    within_s: float,
    what: str,
    every_s: float = 0.05,
    why: Callable[[], str] | None = None,
) -> T | bool:
    """Call ``probe`` every ``every_s`` (a polling interval, not a synchronisation guess)
    until it returns a value other than None or False, and return that value; fail after
    ``within_s``, with ``why()`` (e.g. a log tail) in the message."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        got = await probe()
        if got is not None and got is not False:
            return got
        if loop.time() > deadline:
            detail = f"\n{why()}" if why is not None else ""
            raise AssertionError(f"not {what} after {within_s}s{detail}")
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


async def readiness_becomes(port: int, status: int, worker: WorkerProcess, within_s: float) -> None:
    """Poll the worker's /readyz until it answers ``status``; fail if the worker exits."""
    seen: list[int] = []

    async def answers() -> bool:
        assert worker.alive, f"worker exited:\n{worker.log_text()[-5000:]}"
        code, _ = await http_get(port, "/readyz")
        seen.append(code)
        return code == status

    await poll_until(
        answers, within_s, f"/readyz {status}", every_s=0.2, why=lambda: f"last seen {seen[-1:]}"
    )

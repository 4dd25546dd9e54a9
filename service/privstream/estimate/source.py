"""Where sanitized records come from: a JSON Lines file or the sanitized topic.

Reading the topic: a plain ``AIOKafkaConsumer`` with no consumer group (no
offsets are committed, nothing in the cluster changes), every partition of
the topic assigned, ``isolation_level=read_committed`` (aborted copies of a
batch are never counted: DESIGN §4), from the beginning up to the end
offsets taken at start. For a read_committed consumer those are the last
stable offsets, so an open transaction ends the read where it starts.
Records produced after the start are not read. Connection settings come
from the config's ``kafka`` section: ``bootstrap_servers``, ``client_id``
and ``security`` (PLAINTEXT, SSL with ``ca_file`` / ``cert_file`` /
``key_file``, SASL with the username and password from the same places
``privstream run`` takes them). No noise key is needed: the estimate uses
only what was released.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from privstream.config.models import KafkaConfig
from privstream.errors import PrivstreamError
from privstream.estimate.releases import FIELD_HEADER, Sink, parse_header, refused_fields
from privstream.estimate.suppression import COUNTS_HEADER, parse_counts

#: records read from a file before the progress line appears (on a terminal)
PROGRESS_THRESHOLD = 50_000
CONFIG_HEADER = "privstream-config-sha256"
#: the digest of the fields' release ids (``RecordPlan.release_sha256``); absent before 0.1
RELEASE_HEADER = "privstream-release-sha256"


class Progress:
    """A progress line on stderr: records read and rate, no dependencies.

    ``enabled``: True forces it, False silences it, None shows it only when
    the stream is a terminal. Lines appear once ``threshold`` records are
    read (0: at once), at most every ``interval`` seconds; on a terminal the
    line is redrawn in place, elsewhere one line per update.
    """

    def __init__(
        self,
        stream: IO[str] | None = None,
        enabled: bool | None = None,
        *,
        threshold: int = PROGRESS_THRESHOLD,
        total: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = tty if enabled is None else enabled
        self.tty = tty
        self.threshold = threshold
        self.total = total
        self.clock = clock
        self.started = clock()
        self.count = 0
        self._last = -1.0e9
        self._shown = False

    @property
    def interval(self) -> float:
        return 0.25 if self.tty else 5.0

    def update(self, count: int) -> None:
        """``count`` records read so far."""
        self.count = count
        if not self.enabled or count < self.threshold:
            return
        now = self.clock()
        if now - self._last < self.interval:
            return
        self._last = now
        self._draw(now)

    def _draw(self, now: float, final: bool = False) -> None:
        elapsed = max(now - self.started, 1e-9)
        text = f"privstream estimate: {self.count:,} records read ({self.count / elapsed:,.0f}/s)"
        if final:
            text += ", done"
        elif self.total:
            # offsets: aborted records and transaction markers count too
            text += f", offsets {min(self.count / self.total, 1.0):.0%} of {self.total:,}"
        if self.tty:
            self.stream.write("\r" + text + "\033[K")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._shown = True

    def finish(self) -> None:
        if self._shown:
            self._draw(self.clock(), final=True)
            if self.tty:
                self.stream.write("\n")
            self.stream.flush()


def file_lines(handle: IO[bytes]) -> Iterator[bytes]:
    """Lines of a binary stream, without their line ends."""
    for line in handle:
        yield line.rstrip(b"\r\n")


# --- Kafka -----------------------------------------------------------------------------------


class Message(Protocol):
    """The parts of an aiokafka ConsumerRecord this reader uses."""

    offset: int
    value: bytes | None
    headers: Any


class Consumer(Protocol):
    """The parts of ``AIOKafkaConsumer`` this reader uses (tests pass a fake)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def topics(self) -> Any: ...

    def partitions_for_topic(self, topic: str) -> Any: ...

    def assign(self, partitions: list[Any]) -> None: ...

    async def seek_to_beginning(self, *partitions: Any) -> Any: ...

    async def beginning_offsets(self, partitions: list[Any]) -> Any: ...

    async def end_offsets(self, partitions: list[Any]) -> Any: ...

    async def getmany(
        self, *partitions: Any, timeout_ms: int = 0, max_records: int | None = None
    ) -> Any: ...

    async def position(self, partition: Any) -> int: ...

    def pause(self, *partitions: Any) -> None: ...


@dataclass
class TopicRead:
    """What a topic read saw."""

    topic: str
    partitions: int = 0
    #: records between the beginning and the end offsets taken at start (an upper bound:
    #: aborted records and transaction markers take offsets too)
    expected: int = 0
    records: int = 0
    without_config_header: int = 0
    config_mismatch: int = 0
    #: the first other config hash seen (for the message refusing a topic of another config)
    other_config: str | None = None
    empty_values: int = 0
    #: records the Kafka client could not decode (a header key that is not UTF-8)
    undecodable: int = 0
    #: the last ``privstream-ledger-counts`` header per input partition (cumulative counts)
    ledger_counts: dict[int, dict[str, int]] = field(default_factory=dict)
    #: per field: records whose ``privstream-field-releases`` refused it (another release id)
    field_mismatch: Counter[str] = field(default_factory=Counter)
    #: per refused field: why (``releases.refused_fields``)
    field_reasons: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Expected:
    """What this config released: its hashes, and each estimated field's release id prefix."""

    config: str
    release: str | None = None
    #: name -> release id prefix; None: match by the hashes only
    fields: Mapping[str, str] | None = None


def connection_options(kafka: KafkaConfig, environ: Mapping[str, str]) -> dict[str, Any]:
    """Bootstrap, client id and security from the config (no noise key involved)."""
    from privstream.config.runtime import load_credentials, warn_insecure_tls
    from privstream.kafka.options import connection_options as options_of

    if kafka.security.uses_tls:
        warn_insecure_tls(kafka)
    return options_of(kafka, load_credentials(kafka, environ), f"{kafka.client_id}-estimate")


def make_consumer(kafka: KafkaConfig, environ: Mapping[str, str]) -> Consumer:
    from aiokafka import AIOKafkaConsumer

    from privstream.kafka.decode import tolerate_undecodable_records

    tolerate_undecodable_records()  # a hostile header key is skipped, never a failed read

    consumer: Consumer = AIOKafkaConsumer(
        group_id=None,  # no group: assign partitions, commit nothing
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        **connection_options(kafka, environ),
    )
    return consumer


def _header(headers: Any, name: str) -> Any:
    for key, value in headers or ():
        if key == name:
            return value
    return None


def _config_hash(headers: Any, name: str = CONFIG_HEADER) -> str | None:
    value = _header(headers, name)
    if value is None:
        return None
    try:
        return bytes(value).decode("ascii")
    except (UnicodeDecodeError, TypeError):
        return ""


async def read_topic(
    consumer: Consumer,
    topic: str,
    sink: Sink,
    *,
    expected_config: str,
    skip: Callable[[str], None],
    expected_release: str | None = None,
    expected_fields: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    idle_timeout: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
) -> TopicRead:
    """Feed every committed record of ``topic`` up to the end offsets at start to ``sink``.

    A record whose ``privstream-config-sha256`` header names another config
    is skipped (``skip("config_mismatch")``): it was released under other
    mechanisms and would bias every estimate. Records without the header
    (written by another producer) are read and counted. A record with the
    ``privstream-field-releases`` header is matched field by field instead
    (``expected_fields``; ``releases``): it is passed on with the fields of
    another release id refused, and skipped only when every one is.
    """
    from aiokafka.structs import TopicPartition

    read = TopicRead(topic)
    expected = Expected(expected_config, expected_release, expected_fields)
    try:
        await consumer.start()
        if topic not in await consumer.topics():  # fresh metadata of every topic
            raise PrivstreamError(f"topic {topic!r} does not exist (or this user may not see it)")
        # assigning one partition makes the client track the topic's metadata
        consumer.assign([TopicPartition(topic, 0)])
        partitions = consumer.partitions_for_topic(topic)
        waited = clock()
        while not partitions:
            if clock() - waited > idle_timeout:
                raise PrivstreamError(
                    f"topic {topic!r}: no partition metadata after {idle_timeout:g} s"
                )
            await asyncio.sleep(0.05)
            partitions = consumer.partitions_for_topic(topic)
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        read.partitions = len(assigned)
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        start = await consumer.beginning_offsets(assigned)
        end = await consumer.end_offsets(assigned)
        read.expected = sum(max(end[tp] - start[tp], 0) for tp in assigned)
        if progress is not None:
            progress.total = read.expected
        pending = {tp for tp in assigned if end[tp] > start[tp]}
        done = [tp for tp in assigned if tp not in pending]
        if done:
            consumer.pause(*done)
        last_progress = clock()
        reached: dict[Any, int] = {}
        while pending:
            batches = await consumer.getmany(*sorted(pending), timeout_ms=500, max_records=10_000)
            moved = False
            for tp, messages in batches.items():
                for message in messages:
                    if message.offset >= end[tp]:
                        continue  # produced after the start
                    moved = True
                    _deliver(message, read, expected, sink, skip)
            for tp in sorted(pending):
                position = await consumer.position(tp)
                if position > reached.get(tp, -1):  # aborted data and markers move it too
                    reached[tp] = position
                    moved = True
                if position >= end[tp]:
                    pending.discard(tp)
                    consumer.pause(tp)
                    moved = True
            if progress is not None:
                progress.update(read.records)
            now = clock()
            if moved:
                last_progress = now
            elif now - last_progress > idle_timeout:
                stuck = ", ".join(str(tp.partition) for tp in sorted(pending))
                raise PrivstreamError(
                    f"topic {topic!r}: no progress for {idle_timeout:g} s on partition(s) "
                    f"{stuck} before their end offsets (is the broker reachable?)"
                )
    finally:
        await consumer.stop()
    return read


def _deliver(
    message: Message,
    read: TopicRead,
    expected: Expected,
    sink: Sink,
    skip: Callable[[str], None],
) -> None:
    if getattr(message, "problem", None) is not None:  # ``UndecodableRecord``
        read.undecodable += 1
        skip("undecodable_header")
        return
    config = _config_hash(message.headers)
    refused = _refused(message.headers, expected, read)
    if refused is None:
        release = _config_hash(message.headers, RELEASE_HEADER)
        # the same config calibrated otherwise (another privstream's ``auto``) is another release
        other_release = None not in (release, expected.release) and release != expected.release
        mismatch = config is not None and (config != expected.config or other_release)
    else:  # matched field by field: the config hash may differ (fields reordered or added)
        mismatch = bool(expected.fields) and len(refused) == len(expected.fields or ())
    if config is None:
        read.without_config_header += 1
    elif mismatch:
        read.config_mismatch += 1
        read.other_config = read.other_config or config
        skip("config_mismatch")
        return
    if message.value is None:
        read.empty_values += 1
        skip("empty_value")
        return
    read.records += 1
    _ledger_counts(message, read)
    if refused:
        read.field_mismatch.update(refused.keys())
        sink(message.value, frozenset(refused))
    else:
        sink(message.value)


def _refused(headers: Any, expected: Expected, read: TopicRead) -> dict[str, str] | None:
    """The fields this record releases under another id (``releases``); None: no header."""
    if not expected.fields:
        return None
    value = _header(headers, FIELD_HEADER)
    found = parse_header(value) if value is not None else None
    if found is None:
        return None
    refused = refused_fields(expected.fields, found)
    for name, reason in refused.items():
        read.field_reasons.setdefault(name, reason)
    return refused


def _ledger_counts(message: Message, read: TopicRead) -> None:
    """Keep the partition's latest ledger counts (messages arrive in offset order)."""
    for key, value in message.headers or ():
        if key == COUNTS_HEADER:
            counts = parse_counts(value)
            if counts is not None:
                # the worker names the input partition; else the output partition stands in
                partition = counts.pop("partition", getattr(message, "partition", 0))
                read.ledger_counts[partition] = counts


def run_topic_read(
    kafka: KafkaConfig,
    topic: str,
    sink: Sink,
    *,
    expected_config: str,
    skip: Callable[[str], None],
    environ: Mapping[str, str],
    expected_release: str | None = None,
    expected_fields: Mapping[str, str] | None = None,
    progress: Progress | None,
    idle_timeout: float,
) -> TopicRead:
    """``read_topic`` with a real consumer, in its own event loop; Kafka errors become
    ``PrivstreamError`` naming the topic and the bootstrap servers."""
    from aiokafka.errors import KafkaError

    async def go() -> TopicRead:
        consumer = make_consumer(kafka, environ)
        return await read_topic(
            consumer,
            topic,
            sink,
            expected_config=expected_config,
            skip=skip,
            expected_release=expected_release,
            expected_fields=expected_fields,
            progress=progress,
            idle_timeout=idle_timeout,
        )

    # its connection errors are reported once, below, naming the topic and the servers
    kafka_log = logging.getLogger("aiokafka")
    level = kafka_log.level
    kafka_log.setLevel(logging.CRITICAL)
    try:
        return asyncio.run(go())
    except KafkaError as exc:
        text = str(exc) or type(exc).__name__
        raise PrivstreamError(
            f"reading topic {topic!r} from {kafka.bootstrap_servers}: {text}"
        ) from None
    finally:
        kafka_log.setLevel(level)

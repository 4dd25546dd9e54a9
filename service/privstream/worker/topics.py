"""The topics a worker uses, checked before its first record (a future ``topics create --check``).

A worker never lets a topic come into being by accident: its clients ask
for metadata with auto-creation off (``clients``), and before a session
reads or writes anything ``check_topics`` looks at every topic it names.
The input, output and dead-letter topics must exist. The ledger's
changelog is created when missing, like the input (partitions,
replication) with ``CHANGELOG_CONFIGS``; one that exists must have them.
What would go wrong otherwise:

* an input that does not exist yet has no partition count to
  co-partition the changelog with, and a broker with
  ``auto.create.topics.enable`` would create the changelog on the
  restore's first read, with ``cleanup.policy=delete`` and the broker's
  default partition count: every subject one budget per partition;
* a changelog of another partition count puts a subject's spending on
  another replica than its records; one not exactly ``compact`` drops
  spending after its retention time and reopens budgets;
* a changelog whose records carry the producer's timestamp gives the
  worker no broker clock to check its own against (``clock``): it must use
  ``message.timestamp.type=LogAppendTime``; and one whose
  ``max.message.bytes`` is below the worker's record batches refuses a
  batch's charges on every replay, stalling the partition.

Each refusal is a ``TopicError`` (exit 2) naming the topic, what is wrong
and the command that fixes it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError, for_code

from privstream.errors import TopicError
from privstream.kafka.compat import ConfigResource, ConfigResourceType, MetadataRequest
from privstream.worker.clients import batch_bytes, common_options

if TYPE_CHECKING:
    from privstream.config import KafkaConfig
    from privstream.config.runtime import Runtime

log = logging.getLogger("privstream.worker")

ADMIN_TIMEOUT_MS = 30_000
#: what a changelog must have (``max.message.bytes`` is checked against the batches)
CHANGELOG_CONFIGS = {"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"}
#: Kafka's defaults, for a broker that does not report a config
_DEFAULTS = {"cleanup.policy": "delete", "message.timestamp.type": "CreateTime"}


async def check_topics(kafka: KafkaConfig, runtime: Runtime, changelog: str | None) -> int:
    """Refuse missing or misconfigured topics (``TopicError``); create a missing changelog.

    Returns the input topic's partition count.
    """
    admin = AIOKafkaAdminClient(
        **common_options(kafka, runtime), request_timeout_ms=ADMIN_TIMEOUT_MS
    )
    await admin.start()
    try:
        described = {t: await describe(admin, t) for t in _named(kafka)}
        source = described[kafka.input_topic]
        missing = [topic for topic, shape in described.items() if shape is None]
        if missing or source is None:
            raise _missing(missing, kafka)
        if changelog is not None:
            await _check_changelog(admin, kafka, changelog, source)
        return source[0]
    finally:
        await admin.close()


def _named(kafka: KafkaConfig) -> list[str]:
    return [kafka.input_topic, kafka.output_topic, kafka.dead_letter_topic]


def _missing(topics: list[str], kafka: KafkaConfig) -> TopicError:
    creates = "; ".join(
        f"kafka-topics.sh --bootstrap-server {kafka.bootstrap_servers} --create --topic {t}"
        for t in topics
    )
    return TopicError(
        f"topic {', '.join(map(repr, topics))} does not exist; the worker never creates "
        f"its input, output or dead-letter topic (nor lets a broker auto-create one): "
        f"create it, then start the worker: {creates}"
    )


async def _check_changelog(
    admin: AIOKafkaAdminClient, kafka: KafkaConfig, topic: str, source: tuple[int, int]
) -> None:
    partitions, replicas = source
    existing = await describe(admin, topic)
    if existing is None:
        await _refuse_if_charged_before(admin, kafka, topic, partitions)
        await _create(admin, topic, partitions, replicas)
        log.info("created ledger changelog %s (%d partitions)", topic, partitions)
        return
    if existing[0] != partitions:
        raise TopicError(
            f"ledger changelog {topic!r} has {existing[0]} partitions but the input "
            f"{kafka.input_topic!r} has {partitions}: the changelog must be co-partitioned "
            "with the input. Give privacy.ledger.changelog_topic a new topic (which restarts "
            "every subject's budget) or repartition it"
        )
    configs = await topic_configs(admin, topic, [*CHANGELOG_CONFIGS, "max.message.bytes"])
    for name, wanted in CHANGELOG_CONFIGS.items():
        if configs.get(name, _DEFAULTS[name]) != wanted:
            raise _wrong_config(topic, name, configs.get(name, _DEFAULTS[name]), wanted)
    limit = int(configs.get("max.message.bytes", batch_bytes(kafka)))
    if limit < batch_bytes(kafka):
        raise _wrong_config(topic, "max.message.bytes", str(limit), str(batch_bytes(kafka)))


async def _refuse_if_charged_before(
    admin: AIOKafkaAdminClient, kafka: KafkaConfig, topic: str, partitions: int
) -> None:
    """A missing changelog of a group that has consumed its input: refuse, never re-create.

    The group's committed input offsets say records were already released, and
    charged to a changelog that is now gone (deleted by hand or by a tool): an
    empty one would start every subject's budget again. Creating it by hand is
    the deliberate way to accept that (a ledger added to a running deployment).
    """
    wanted = [TopicPartition(kafka.input_topic, p) for p in range(partitions)]
    committed = await admin.list_consumer_group_offsets(kafka.group_id, partitions=wanted)
    if not any(meta.offset >= 0 for meta in committed.values()):
        return
    raise TopicError(
        f"ledger changelog {topic!r} does not exist, but group {kafka.group_id!r} has "
        f"committed offsets on {kafka.input_topic!r}: the records before them were charged "
        "to a changelog that is gone, and an empty one would give every subject its budget "
        "again. Restore the changelog if you can; to start every budget afresh on purpose "
        f"(or to add a ledger to a running deployment), create it yourself: kafka-topics.sh "
        f"--bootstrap-server <servers> --create --topic {topic} --partitions {partitions} "
        "--config cleanup.policy=compact --config message.timestamp.type=LogAppendTime"
    )


def _wrong_config(topic: str, name: str, found: str, wanted: str) -> TopicError:
    why = {
        "cleanup.policy": "deletion would forget spending and reopen budgets",
        "message.timestamp.type": "the broker's append time is the clock the worker's "
        "own is checked against",
        "max.message.bytes": "the worker's changelog record batches are up to "
        "min(kafka.max_message_bytes, 1 MiB)",
    }[name]
    return TopicError(
        f"ledger changelog {topic!r} has {name}={found!r}; it must be {wanted!r} ({why}): "
        f"kafka-configs.sh --bootstrap-server <servers> --alter --entity-type topics "
        f"--entity-name {topic} --add-config {name}={wanted}"
    )


async def describe(admin: AIOKafkaAdminClient, topic: str) -> tuple[int, int] | None:
    """(partitions, replication factor) of ``topic``; None if it does not exist.

    A metadata request with auto-creation off, sent whatever the process's
    aiokafka does by default: a broker with ``auto.create.topics.enable``
    would otherwise create the topic being asked about.
    """
    request = MetadataRequest([topic], allow_auto_topic_creation=False)
    response = await admin._send_request(request)  # private: no public form of this flag
    [described] = response.to_object()["topics"]
    error = for_code(described["error_code"])
    if error is UnknownTopicOrPartitionError:
        return None
    if described["error_code"] != 0:
        raise error(f"describing topic {topic!r}")
    parts = described["partitions"]
    return len(parts), max((len(p["replicas"]) for p in parts), default=1)


async def topic_configs(admin: AIOKafkaAdminClient, topic: str, names: list[str]) -> dict[str, str]:
    """The values of these configs of ``topic`` (default ones included) that the broker gives."""
    resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs=dict.fromkeys(names))
    responses: list[Any] = await admin.describe_configs([resource])
    found: dict[str, str] = {}
    for response in responses:
        for _error, _message, _type, _name, entries in response.resources:
            found.update((str(e[0]), str(e[1])) for e in entries if e[0] in names)
    return found


async def _create(admin: AIOKafkaAdminClient, topic: str, partitions: int, replicas: int) -> None:
    new = NewTopic(topic, partitions, replicas, topic_configs=dict(CHANGELOG_CONFIGS))
    response = await admin.create_topics([new], timeout_ms=ADMIN_TIMEOUT_MS)
    for name, code, *rest in response.topic_errors:
        error = for_code(code)
        if code != 0 and error is not TopicAlreadyExistsError:  # a second replica was faster
            raise error(f"creating ledger changelog {name!r}: {rest[0] if rest else ''}")


#: what the aggregates' internal topic must have: one partition (one total order of
#: partials, progress and release markers), compacted (the markers are kept for good)
AGGREGATES_CONFIGS = {"cleanup.policy": "compact"}


async def check_aggregate_topics(
    kafka: KafkaConfig, runtime: Runtime, internal: str, outputs: list[str]
) -> int:
    """The aggregates' topics: the outputs must exist, the internal topic is created when
    missing (one partition, compacted); returns the input topic's partition count."""
    admin = AIOKafkaAdminClient(
        **common_options(kafka, runtime), request_timeout_ms=ADMIN_TIMEOUT_MS
    )
    await admin.start()
    try:
        described = {t: await describe(admin, t) for t in [kafka.input_topic, *outputs]}
        missing = [topic for topic, shape in described.items() if shape is None]
        source = described[kafka.input_topic]
        if missing or source is None:
            raise _missing(missing, kafka)
        existing = await describe(admin, internal)
        if existing is None:
            await _refuse_if_released_before(admin, kafka, internal, source[0])
            new = NewTopic(internal, 1, source[1], topic_configs=dict(AGGREGATES_CONFIGS))
            response = await admin.create_topics([new], timeout_ms=ADMIN_TIMEOUT_MS)
            for name, code, *_ in response.topic_errors:
                if code != 0 and for_code(code) is not TopicAlreadyExistsError:
                    raise for_code(code)(f"creating the aggregates' topic {name!r}")
            log.info("created the aggregates' internal topic %s", internal)
            return source[0]
        configs = await topic_configs(admin, internal, ["cleanup.policy"])
        policy = configs.get("cleanup.policy", _DEFAULTS["cleanup.policy"])
        if existing[0] != 1 or policy != "compact":
            raise TopicError(
                f"the aggregates' topic {internal!r} has {existing[0]} partitions and "
                f"cleanup.policy={policy!r}; it must have 1 partition and 'compact' (deletion "
                "would forget which windows were released: a second release). Delete it only "
                "with the aggregates' consumer group, or recreate it as: kafka-topics.sh "
                f"--bootstrap-server <servers> --create --topic {internal} --partitions 1 "
                "--config cleanup.policy=compact"
            )
        return source[0]
    finally:
        await admin.close()


async def _refuse_if_released_before(
    admin: AIOKafkaAdminClient, kafka: KafkaConfig, internal: str, partitions: int
) -> None:
    """A missing internal topic of an aggregates group that committed offsets: its release
    markers are gone, and a new one could release a window a second time."""
    group = f"{kafka.group_id}.aggregates"
    wanted = [TopicPartition(kafka.input_topic, p) for p in range(partitions)]
    committed = await admin.list_consumer_group_offsets(group, partitions=wanted)
    if any(meta.offset >= 0 for meta in committed.values()):
        raise TopicError(
            f"the aggregates' topic {internal!r} does not exist, but group {group!r} has "
            f"committed offsets on {kafka.input_topic!r}: the markers of the windows already "
            "released are gone, and a new topic could release one again. Restore the topic, "
            f"or start afresh on purpose: delete the group (kafka-consumer-groups.sh --delete "
            f"--group {group}) and give the aggregates a new output topic"
        )

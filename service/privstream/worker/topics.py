"""The broker's side of the topics: looked at before a worker's first record, and by ``topics``.

A worker never lets a topic come into being by accident: its clients ask
for metadata with auto-creation off (``clients``), and before a session
reads or writes anything ``check_topics`` looks at every topic it names,
judged by the rules of ``topic_plan`` (the same ones ``privstream topics
check`` applies and ``privstream topics create`` creates by). The input,
output and dead-letter topics must exist. The ledger's changelog is
created when missing, like the input (partitions, replication); one that
exists must have ``topic_plan.CHANGELOG_CONFIGS``. What would go wrong otherwise:

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

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    CoordinatorLoadInProgressError,
    GroupCoordinatorNotAvailableError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    for_code,
)

from privstream.errors import TopicError
from privstream.kafka.compat import ConfigResource, ConfigResourceType, MetadataRequest
from privstream.kafka.options import connection_options
from privstream.worker.topic_plan import (
    Found,
    TopicSpec,
    config_names,
    notes,
    problems,
    topic_specs,
)

if TYPE_CHECKING:
    from privstream.config import KafkaConfig
    from privstream.config.runtime import Credentials

log = logging.getLogger("privstream.worker")

ADMIN_TIMEOUT_MS = 30_000
#: waits between asks for a topic just created (about 15 s in all)
VISIBLE_RETRIES_S = (0.02, 0.05, 0.1, 0.2, 0.5, *[1.0] * 14)
#: waits between asks while a fresh cluster elects the group coordinator (about 30 s in all)
COORDINATOR_RETRIES_S = (0.1, 0.2, 0.5, 1.0, 2.0, *[4.0] * 6)


@dataclass
class Survey:
    """What the broker has of a config's topics, judged by ``topic_plan``."""

    specs: list[TopicSpec]
    found: dict[str, Found | None]
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def missing(self) -> list[TopicSpec]:
        return [spec for spec in self.specs if self.found[spec.name] is None]

    @property
    def source(self) -> Found | None:
        return self.found[self.specs[0].name]


async def open_admin(kafka: KafkaConfig, credentials: Credentials | None) -> AIOKafkaAdminClient:
    """A started admin client of ``kafka`` (the caller closes it)."""
    options = connection_options(kafka, credentials, kafka.client_id)
    admin = AIOKafkaAdminClient(**options, request_timeout_ms=ADMIN_TIMEOUT_MS)
    await admin.start()
    return admin


async def survey(admin: AIOKafkaAdminClient, kafka: KafkaConfig, changelog: str | None) -> Survey:
    """Describe every topic of ``kafka`` (and ``changelog``) and judge the ones that exist."""
    specs = topic_specs(kafka, changelog)
    found = {spec.name: await _found(admin, spec) for spec in specs}
    result = Survey(specs, found)
    source = result.source
    if source is None:
        return result
    for spec in specs:
        existing = found[spec.name]
        if existing is not None:
            result.problems += problems(spec, existing, source, kafka)
            result.notes += notes(spec, existing, source)
    return result


async def _found(admin: AIOKafkaAdminClient, spec: TopicSpec) -> Found | None:
    shape = await describe(admin, spec.name)
    if shape is None:
        return None
    return Found(*shape, await topic_configs(admin, spec.name, config_names(spec)))


async def check_topics(
    kafka: KafkaConfig, credentials: Credentials | None, changelog: str | None
) -> int:
    """The worker's start-up check: refuse missing or misconfigured topics (``TopicError``),
    create a missing changelog, log the advice. Returns the input's partition count."""
    admin = await open_admin(kafka, credentials)
    try:
        found = await survey(admin, kafka, changelog)
        absent = [s for s in found.missing if s.role != "changelog"]
        if absent or found.source is None:
            raise missing_topics(absent, kafka)
        if found.problems:
            raise TopicError("; ".join(found.problems))
        for note in found.notes:
            log.warning("%s (`privstream topics check` lists what differs)", note)
        source = found.source
        for spec in found.missing:  # the changelog: the only one left
            await create_changelog(admin, kafka, spec, source)
        return source.partitions
    finally:
        await admin.close()


def missing_topics(specs: list[TopicSpec], kafka: KafkaConfig) -> TopicError:
    topics = [spec.name for spec in specs]
    creates = "; ".join(
        f"kafka-topics.sh --bootstrap-server {kafka.bootstrap_servers} --create --topic {t}"
        for t in topics
    )
    return TopicError(
        f"topic {', '.join(map(repr, topics))} does not exist; the worker never creates "
        f"its input, output or dead-letter topic (nor lets a broker auto-create one): "
        f"create them with `privstream topics create --config <this config>` (or by hand: "
        f"{creates}), then start the worker"
    )


async def create_changelog(
    admin: AIOKafkaAdminClient,
    kafka: KafkaConfig,
    spec: TopicSpec,
    source: Found,
    replication: int | None = None,
) -> None:
    """Create a missing ledger changelog like the input (``replication``: the input's unless
    given), unless the group has consumed the input already."""
    await _refuse_if_charged_before(admin, kafka, spec.name, source.partitions)
    await create(admin, spec, source.partitions, replication or source.replication)
    log.info("created ledger changelog %s (%d partitions)", spec.name, source.partitions)


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
    committed = await _committed(admin, kafka.group_id, wanted)
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


async def _committed(
    admin: AIOKafkaAdminClient, group: str, partitions: list[TopicPartition]
) -> dict[TopicPartition, Any]:
    """The group's committed offsets, waiting out a coordinator still being elected.

    A fresh cluster creates its offsets topic on the first group request and
    answers "coordinator not available" until it has: for a few seconds.
    """
    for delay in COORDINATOR_RETRIES_S:
        try:
            return dict(await admin.list_consumer_group_offsets(group, partitions=partitions))
        except (GroupCoordinatorNotAvailableError, CoordinatorLoadInProgressError):
            await asyncio.sleep(delay)
    return dict(await admin.list_consumer_group_offsets(group, partitions=partitions))


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


async def create(
    admin: AIOKafkaAdminClient, spec: TopicSpec, partitions: int, replication: int
) -> None:
    """Create ``spec`` with ``topic_plan``'s configs (one that appeared meanwhile is kept);
    return once the broker's metadata has it."""
    configs = spec.create_configs(replication)
    new = NewTopic(spec.name, partitions, replication, topic_configs=configs)
    response = await admin.create_topics([new], timeout_ms=ADMIN_TIMEOUT_MS)
    for name, code, *rest in response.topic_errors:
        error = for_code(code)
        if code != 0 and error is not TopicAlreadyExistsError:  # a second replica was faster
            raise error(f"creating {spec.role} topic {name!r}: {rest[0] if rest else ''}")
    await _visible(admin, spec)


async def _visible(admin: AIOKafkaAdminClient, spec: TopicSpec) -> None:
    """Wait until a created topic is in the metadata the broker answers with.

    The controller has created it when CreateTopics answers; the broker
    asked next learns it a moment later, and until then describes it as
    missing (the next topic would be made without the input's count).
    """
    for delay in VISIBLE_RETRIES_S:
        if await describe(admin, spec.name) is not None:
            return
        await asyncio.sleep(delay)
    raise TopicError(
        f"{spec.role} topic {spec.name!r} was created but the broker has not listed it "
        f"within {sum(VISIBLE_RETRIES_S):.0f} s; run the command again once it does"
    )


#: what the aggregates' internal topic must have: one partition (one total order of
#: partials, progress and release markers), compacted (the markers are kept for good)
AGGREGATES_CONFIGS = {"cleanup.policy": "compact"}


async def check_aggregate_topics(
    kafka: KafkaConfig, credentials: Credentials | None, internal: str, outputs: list[str]
) -> tuple[int, dict[str, int]]:
    """The aggregates' topics: the outputs must exist, the internal topic is created when
    missing (one partition, compacted); returns the input topic's partition count and each
    output topic's."""
    admin = await open_admin(kafka, credentials)
    try:
        described = {t: await describe(admin, t) for t in [kafka.input_topic, *outputs]}
        missing = [topic for topic, shape in described.items() if shape is None]
        source = described[kafka.input_topic]
        if missing or source is None:
            raise TopicError(
                f"topic {', '.join(map(repr, missing))} does not exist; the worker never "
                "creates its input or an aggregate's output_topic: create it, then start "
                "the worker (privstream topics create creates the record path's topics)"
            )
        counts = {t: shape[0] for t in outputs if (shape := described[t]) is not None}
        existing = await describe(admin, internal)
        if existing is None:
            await _refuse_if_released_before(admin, kafka, internal, source[0])
            new = NewTopic(internal, 1, source[1], topic_configs=dict(AGGREGATES_CONFIGS))
            response = await admin.create_topics([new], timeout_ms=ADMIN_TIMEOUT_MS)
            for name, code, *_ in response.topic_errors:
                if code != 0 and for_code(code) is not TopicAlreadyExistsError:
                    raise for_code(code)(f"creating the aggregates' topic {name!r}")
            log.info("created the aggregates' internal topic %s", internal)
            return source[0], counts
        configs = await topic_configs(admin, internal, ["cleanup.policy"])
        policy = configs.get("cleanup.policy", "delete")  # Kafka's default
        if existing[0] != 1 or policy != "compact":
            raise TopicError(
                f"the aggregates' topic {internal!r} has {existing[0]} partitions and "
                f"cleanup.policy={policy!r}; it must have 1 partition and 'compact' (deletion "
                "would forget which windows were released: a second release). Delete it only "
                "with the aggregates' consumer group, or recreate it as: kafka-topics.sh "
                f"--bootstrap-server <servers> --create --topic {internal} --partitions 1 "
                "--config cleanup.policy=compact"
            )
        return source[0], counts
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
            f"--group {group}); the new state's windows then start a window and a grace past "
            "its first transaction, as docs/aggregates.md says (Adding partitions)"
        )

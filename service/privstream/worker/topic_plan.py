"""The topics a config needs and how each must look: one rule book for ``run`` and ``topics``.

``privstream topics create`` creates what this describes, ``privstream topics
check`` and the worker's start-up check (``topics.check_topics``) compare what
the broker has with it. Pure: no client here, the broker's answers come in as
``Found``.

Two strengths of rule:

* **required** (a ``problem``: the worker exits 2, ``topics check`` exits 2):
  the input, output and dead-letter topics exist; the ledger's changelog has
  the input's partition count, ``cleanup.policy=compact``,
  ``message.timestamp.type=LogAppendTime`` and room for the worker's record
  batches (``topics`` says why each one);
* **advised** (a ``note``, a WARNING): what ``topics create`` chooses and a
  running worker does not depend on. The output and dead-letter topics get
  the input's partition count (the output partition is the input partition
  modulo the output's count, ``produce``: with as many partitions, input
  partition p feeds output partition p; a dead letter goes by its raw key,
  so the dead-letter topic's count is free); ``min.insync.replicas`` is
  ``min_insync(replication)``; ``compression.type=producer`` keeps the
  worker's uncompressed transactional batches as written (a codec on the
  topic makes the broker recompress every batch, latency on every commit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from privstream.worker.clients import batch_bytes

if TYPE_CHECKING:
    from privstream.config import KafkaConfig

#: what a changelog must have (``max.message.bytes`` is checked against the batches)
CHANGELOG_CONFIGS = {"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"}
#: what ``topics create`` sets on every topic it creates
CREATED_CONFIGS = {"compression.type": "producer"}
#: Kafka's defaults, for a broker that does not report a config
DEFAULTS = {
    "cleanup.policy": "delete",
    "message.timestamp.type": "CreateTime",
    "compression.type": "producer",
    "min.insync.replicas": "1",
}


@dataclass(frozen=True)
class TopicSpec:
    """One topic privstream uses: its role, name and the configs it must or should have."""

    role: str  # input, output, dead-letter, changelog
    name: str
    required: Mapping[str, str] = field(default_factory=dict)

    def create_configs(self, replication: int) -> dict[str, str]:
        """The configs ``topics create`` gives it on a cluster of this replication."""
        insync = {"min.insync.replicas": str(min_insync(replication))}
        return {**CREATED_CONFIGS, **insync, **self.required}


@dataclass(frozen=True)
class Found:
    """What the broker says about one existing topic."""

    partitions: int
    replication: int
    configs: Mapping[str, str]

    def config(self, name: str) -> str:
        return self.configs.get(name, DEFAULTS.get(name, ""))


def min_insync(replication: int) -> int:
    """One replica may be down without stopping writes; never fewer than two of three."""
    return max(1, min(2, replication - 1))


def topic_specs(kafka: KafkaConfig, changelog: str | None) -> list[TopicSpec]:
    """The topics of ``kafka`` (and the ledger's changelog, if any), the input first."""
    specs = [
        TopicSpec("input", kafka.input_topic),
        TopicSpec("output", kafka.output_topic),
        TopicSpec("dead-letter", kafka.dead_letter_topic),
    ]
    if changelog is not None:
        specs.append(TopicSpec("changelog", changelog, CHANGELOG_CONFIGS))
    return specs


def config_names(spec: TopicSpec) -> list[str]:
    """The configs to ask the broker for, to judge ``spec``."""
    names = [*CREATED_CONFIGS, "min.insync.replicas", *spec.required]
    return [*names, "max.message.bytes"] if spec.role == "changelog" else names


def problems(spec: TopicSpec, found: Found, source: Found, kafka: KafkaConfig) -> list[str]:
    """Why the worker cannot use ``found`` as ``spec`` (empty: it can)."""
    if spec.role != "changelog":
        return []
    topic = spec.name
    if found.partitions != source.partitions:
        return [
            f"ledger changelog {topic!r} has {found.partitions} partitions but the input "
            f"{kafka.input_topic!r} has {source.partitions}: the changelog must be "
            "co-partitioned with the input. Give privacy.ledger.changelog_topic a new topic "
            "(which restarts every subject's budget) or repartition it"
        ]
    wrong = [
        wrong_config(topic, name, found.config(name), wanted)
        for name, wanted in spec.required.items()
        if found.config(name) != wanted
    ]
    limit = int(found.configs.get("max.message.bytes", batch_bytes(kafka)))
    if limit < batch_bytes(kafka):
        wrong.append(wrong_config(topic, "max.message.bytes", str(limit), str(batch_bytes(kafka))))
    return wrong


def notes(spec: TopicSpec, found: Found, source: Found) -> list[str]:
    """Where ``found`` differs from what ``topics create`` would make (advice only)."""
    said = []
    if spec.role == "output" and found.partitions != source.partitions:
        said.append(
            f"output topic {spec.name!r} has {found.partitions} partitions, the input "
            f"{source.partitions}: input partition p is written to output partition p modulo "
            f"{found.partitions}, so the output is not co-partitioned with the input"
        )
    wanted = min_insync(found.replication)
    if int(found.config("min.insync.replicas")) < wanted:
        said.append(
            f"{spec.role} topic {spec.name!r} has min.insync.replicas="
            f"{found.config('min.insync.replicas')} with {found.replication} replicas: a "
            f"committed batch may live on one broker only; {wanted} is advised"
        )
    if found.config("compression.type") != "producer":
        said.append(
            f"{spec.role} topic {spec.name!r} has compression.type="
            f"{found.config('compression.type')}: the broker recompresses every batch the "
            "worker commits (latency); 'producer' keeps them as written"
        )
    return said


def wrong_config(topic: str, name: str, found: str, wanted: str) -> str:
    """A changelog config that breaks the ledger, why, and the command that fixes it."""
    why = {
        "cleanup.policy": "deletion would forget spending and reopen budgets",
        "message.timestamp.type": "the broker's append time is the clock the worker's "
        "own is checked against",
        "max.message.bytes": "the worker's changelog record batches are up to "
        "min(kafka.max_message_bytes, 1 MiB)",
    }[name]
    return (
        f"ledger changelog {topic!r} has {name}={found!r}; it must be {wanted!r} ({why}): "
        f"kafka-configs.sh --bootstrap-server <servers> --alter --entity-type topics "
        f"--entity-name {topic} --add-config {name}={wanted}"
    )

"""The topics' rule book (``worker.topic_plan``): what the worker refuses, what it advises,
and what ``topics create`` sets; no broker (the integration tests have one)."""

from __future__ import annotations

import pytest
from privstream.config import KafkaConfig
from privstream.worker.clients import batch_bytes
from privstream.worker.topic_plan import Found, min_insync, notes, problems, topic_specs

KAFKA = KafkaConfig(input_topic="in", output_topic="out", dead_letter_topic="dlq")
GOOD_CHANGELOG = {"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"}


@pytest.mark.parametrize(("replication", "insync"), [(1, 1), (2, 1), (3, 2), (5, 2)])
def test_min_insync_leaves_one_replica_to_lose(replication: int, insync: int) -> None:
    assert min_insync(replication) == insync


def test_the_specs_name_every_topic_and_what_create_sets() -> None:
    by_role = {spec.role: spec for spec in topic_specs(KAFKA, "cl")}
    assert [s.name for s in topic_specs(KAFKA, None)] == ["in", "out", "dlq"]
    assert by_role["changelog"].create_configs(3) == {
        "compression.type": "producer",
        "min.insync.replicas": "2",
        **GOOD_CHANGELOG,
    }
    assert by_role["output"].create_configs(1) == {
        "compression.type": "producer",
        "min.insync.replicas": "1",
    }


def test_a_changelog_is_refused_for_its_partitions_policy_clock_and_size() -> None:
    changelog = {spec.role: spec for spec in topic_specs(KAFKA, "cl")}["changelog"]
    source = Found(4, 1, {})
    assert problems(changelog, Found(4, 1, GOOD_CHANGELOG), source, KAFKA) == []
    [partitions] = problems(changelog, Found(2, 1, GOOD_CHANGELOG), source, KAFKA)
    assert "has 2 partitions but the input 'in' has 4" in partitions
    defaults = problems(changelog, Found(4, 1, {}), source, KAFKA)  # the broker's defaults
    assert [p.split(";")[0] for p in defaults] == [
        "ledger changelog 'cl' has cleanup.policy='delete'",
        "ledger changelog 'cl' has message.timestamp.type='CreateTime'",
    ]
    small = {**GOOD_CHANGELOG, "max.message.bytes": str(batch_bytes(KAFKA) - 1)}
    [size] = problems(changelog, Found(4, 1, small), source, KAFKA)
    assert f"--add-config max.message.bytes={batch_bytes(KAFKA)}" in size


def test_other_topics_are_never_refused_only_advised() -> None:
    by_role = {spec.role: spec for spec in topic_specs(KAFKA, None)}
    source = Found(4, 3, {"min.insync.replicas": "2"})
    odd = Found(1, 3, {"min.insync.replicas": "1", "compression.type": "zstd"})
    for role in ("output", "dead-letter"):
        assert problems(by_role[role], odd, source, KAFKA) == []
    said = notes(by_role["output"], odd, source)
    assert len(said) == 3
    assert "has 1 partitions, the input 4" in said[0]
    assert "min.insync.replicas=1 with 3 replicas" in said[1] and "2 is advised" in said[1]
    assert "compression.type=zstd" in said[2]
    # a dead letter goes by its raw key: its partition count is free
    assert not any("partitions" in n for n in notes(by_role["dead-letter"], odd, source))
    assert notes(by_role["output"], Found(4, 3, {"min.insync.replicas": "2"}), source) == []

"""``privstream topics create | check`` on a real broker, and the worker's start-up check
(``worker.topics.check_topics``) judging the same topics the same way."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from privstream.cli.main import main
from privstream.config import load_config
from privstream.errors import TopicError
from privstream.worker.topics import check_topics, describe, topic_configs

from tests.support.broker import create_topics
from tests.support.ledger import body
from tests.support.worker_proc import PRIVACY, unique_topics, write_config

CHANGELOG_KEYS = ["cleanup.policy", "message.timestamp.type", "compression.type"]


async def shape(bootstrap: str, topic: str, names: list[str]) -> tuple[int, dict[str, str]]:
    """(partitions, the named configs) of an existing ``topic``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await describe(admin, topic)
        assert described is not None, f"{topic} does not exist"
        return described[0], await topic_configs(admin, topic, names)
    finally:
        await admin.close()


def topics(argv: list[str], config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Exit code and stdout+stderr of ``privstream topics ARGV --config CONFIG``."""
    code = main(["topics", *argv, "--config", str(config)])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_create_makes_every_topic_co_partitioned_and_the_worker_accepts_them(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kafka = unique_topics("topics-create")
    config = write_config(tmp_path / "c.yaml", kafka_bootstrap, kafka, body())
    changelog = f"{kafka['input_topic']}-privstream-ledger"
    code, said = topics(["create", "--partitions", "3"], config, capsys)
    assert code == 0, said
    for role in ("input", "output", "dead-letter", "changelog"):
        assert f"created {role} topic" in said, said
    for topic in (kafka["input_topic"], kafka["output_topic"], kafka["dead_letter_topic"]):
        assert asyncio.run(shape(kafka_bootstrap, topic, []))[0] == 3
    partitions, configs = asyncio.run(shape(kafka_bootstrap, changelog, CHANGELOG_KEYS))
    assert partitions == 3
    assert configs == {
        "cleanup.policy": "compact",
        "message.timestamp.type": "LogAppendTime",
        "compression.type": "producer",
    }
    assert topics(["check"], config, capsys)[0] == 0
    again, said = topics(["create"], config, capsys)  # nothing missing: creates nothing
    assert again == 0 and "created" not in said, said
    # the worker's own start-up check: the same topics pass, nothing is created
    loaded = load_config(config)
    assert loaded.kafka is not None
    assert asyncio.run(check_topics(loaded.kafka, None, changelog)) == 3


def test_check_refuses_what_the_worker_refuses_with_the_same_words(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kafka = unique_topics("topics-check")
    config = write_config(tmp_path / "c.yaml", kafka_bootstrap, kafka, body())
    changelog = f"{kafka['input_topic']}-privstream-ledger"
    code, said = topics(["check"], config, capsys)
    assert code == 2, said
    assert f"input topic '{kafka['input_topic']}' does not exist" in said
    assert "a worker would refuse to start (exit 2)" in said

    named = [kafka["input_topic"], kafka["output_topic"], kafka["dead_letter_topic"]]
    asyncio.run(create_topics(kafka_bootstrap, named, 2))
    # a changelog a tool made with the broker's defaults: deletion, producer timestamps
    asyncio.run(create_topics(kafka_bootstrap, [changelog], 2))
    code, said = topics(["create", "--check"], config, capsys)
    assert code == 2, said
    assert f"ledger changelog '{changelog}' has cleanup.policy='delete'" in said
    assert "--add-config cleanup.policy=compact" in said  # the fix
    loaded = load_config(config)
    assert loaded.kafka is not None
    with pytest.raises(TopicError) as refused:
        asyncio.run(check_topics(loaded.kafka, None, changelog))
    assert f"ledger changelog '{changelog}' has cleanup.policy='delete'" in str(refused.value)


def test_a_new_input_needs_a_partition_count_and_an_output_of_another_count_is_a_note(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kafka = unique_topics("topics-notes")
    config = write_config(tmp_path / "c.yaml", kafka_bootstrap, kafka, PRIVACY)
    code, said = topics(["create"], config, capsys)
    assert code == 2, said
    assert "give --partitions N" in said
    assert not asyncio.run(_exists(kafka_bootstrap, kafka["input_topic"]))

    asyncio.run(create_topics(kafka_bootstrap, [kafka["input_topic"]], 4))
    asyncio.run(create_topics(kafka_bootstrap, [kafka["output_topic"]], 1))
    code, said = topics(["create", "--partitions", "9"], config, capsys)
    assert code == 0, said
    assert "--partitions 9 is not applied" in said  # an existing input keeps its count
    assert asyncio.run(shape(kafka_bootstrap, kafka["dead_letter_topic"], []))[0] == 4
    assert "changelog" not in said  # no ledger, no changelog
    assert f"output topic '{kafka['output_topic']}' has 1 partitions, the input 4" in said, said


async def _exists(bootstrap: str, topic: str) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return await describe(admin, topic) is not None
    finally:
        await admin.close()

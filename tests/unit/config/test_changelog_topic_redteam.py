"""Red team: the ledger's changelog must be a topic of its own.

``privacy.ledger.changelog_topic`` equal to the output topic was accepted. The
worker then asks for that topic to be ``compact`` with ``LogAppendTime``
(``topic_plan.wrong_config`` prints the ``kafka-configs.sh --alter`` command); an
operator who runs it has compaction delete sanitized records by key, and every
ledger record (its key: the subject's raw message key, its value: the
subject's spending per window) lands in the analysts' topic. As the input or
dead-letter topic it corrupts those, and the next restore fails on records
that are no ledger records. The default name (input + ``-privstream-ledger``)
can collide with a configured topic the same way.
"""

from __future__ import annotations

from typing import Any

import pytest
from privstream.config.load import parse_config
from privstream.errors import ConfigError


def config(changelog: str | None, output: str = "clean") -> dict[str, Any]:
    ledger: dict[str, Any] = {"window": "1d", "epsilon": 10}
    if changelog is not None:
        ledger["changelog_topic"] = changelog
    return {
        "kafka": {"input_topic": "raw", "output_topic": output, "dead_letter_topic": "dlq"},
        "privacy": {"epsilon": 10, "delta": 1e-6, "subject": "user", "ledger": ledger},
        "fields": [
            {"name": "user", "kind": "drop"},
            {"name": "x", "kind": "real", "bounds": [0, 1], "mechanism": "laplace", "epsilon": 1},
        ],
    }


@pytest.mark.parametrize("topic", ["raw", "clean", "dlq"])
def test_a_changelog_that_is_another_topic_of_the_worker_is_refused(topic: str) -> None:
    with pytest.raises(ConfigError, match="changelog_topic"):
        parse_config(config(topic))


def test_the_default_changelog_name_colliding_with_the_output_is_refused() -> None:
    with pytest.raises(ConfigError, match="changelog"):
        parse_config(config(None, output="raw-privstream-ledger"))


def test_a_changelog_of_its_own_is_accepted() -> None:
    parse_config(config("raw-ledger"))
    parse_config(config(None))


def test_a_changelog_name_kafka_refuses_is_a_config_error() -> None:
    """An input of 240 characters is a Kafka name; ``<input>-privstream-ledger`` (258) is
    not (at most 249): the worker retried describing it for ever."""
    data = config(None)
    data["kafka"]["input_topic"] = "r" * 240
    with pytest.raises(ConfigError, match="changelog"):
        parse_config(data)


@pytest.mark.parametrize("name", ["in put", "raw/events", "x" * 250, "..", "raw\u00e9"])
def test_a_topic_name_kafka_refuses_is_a_config_error(name: str) -> None:
    data = config("raw-ledger")
    data["kafka"]["output_topic"] = name
    with pytest.raises(ConfigError, match="output_topic"):
        parse_config(data)

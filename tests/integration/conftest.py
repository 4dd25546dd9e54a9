"""Broker and schema registry for the integration tests: one each per test session (see
tests/support/broker.py and tests/support/registry.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import registry as registries
from tests.support.broker import kafka_broker


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    with kafka_broker() as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def schema_registry_server() -> Iterator[registries.Registry]:
    """The registry itself: the outage test stops and restarts it."""
    with registries.schema_registry() as registry:
        yield registry


@pytest.fixture(scope="session")
def schema_registry(schema_registry_server: registries.Registry) -> str:
    """The URL of a running Confluent-compatible schema registry."""
    return schema_registry_server.url


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)

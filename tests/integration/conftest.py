"""Broker for the integration tests: one per test session (see tests/support/broker.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.broker import kafka_broker


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    with kafka_broker() as bootstrap:
        yield bootstrap


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)

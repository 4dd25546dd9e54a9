"""The HTTP endpoint in-process: routes, readiness flag, method handling."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from service.worker import Health, HttpEndpoint
from tests.http_get import http_request


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[HttpEndpoint, Health]]:
    registry = CollectorRegistry()
    Counter("probe_events", "a test counter", registry=registry).inc(3)
    health = Health()
    server = HttpEndpoint(registry, health, "127.0.0.1", 0)
    await server.start()
    yield server, health
    await server.stop()


async def test_readyz_follows_the_health_flag(endpoint: tuple[HttpEndpoint, Health]) -> None:
    server, health = endpoint
    assert await http_request(server.port, "GET /readyz HTTP/1.1") == (503, "not ready\n")
    health.ready = True
    assert await http_request(server.port, "GET /readyz HTTP/1.1") == (200, "ready\n")


async def test_metrics_serves_the_injected_registry(endpoint: tuple[HttpEndpoint, Health]) -> None:
    server, _ = endpoint
    status, body = await http_request(server.port, "GET /metrics?x=1 HTTP/1.1")
    assert status == 200
    assert "probe_events_total 3.0" in body


async def test_unknown_path_and_method(endpoint: tuple[HttpEndpoint, Health]) -> None:
    server, _ = endpoint
    assert (await http_request(server.port, "GET /admin HTTP/1.1"))[0] == 404
    assert (await http_request(server.port, "POST /metrics HTTP/1.1"))[0] == 405
    assert await http_request(server.port, "GET /healthz HTTP/1.1") == (200, "ok\n")

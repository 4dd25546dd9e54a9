"""The HTTP endpoint in-process: routes, readiness flag, method handling."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from service.worker import Health, HttpEndpoint


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[HttpEndpoint, Health]]:
    registry = CollectorRegistry()
    Counter("probe_events", "a test counter", registry=registry).inc(3)
    health = Health()
    server = HttpEndpoint(registry, health, "127.0.0.1", 0)
    await server.start()
    yield server, health
    await server.stop()


async def request(port: int, line: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{line}\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = data.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


async def test_readyz_follows_the_health_flag(endpoint: tuple[HttpEndpoint, Health]) -> None:
    server, health = endpoint
    assert await request(server.port, "GET /readyz HTTP/1.1") == (503, "not ready\n")
    health.ready = True
    assert await request(server.port, "GET /readyz HTTP/1.1") == (200, "ready\n")


async def test_metrics_serves_the_injected_registry(endpoint: tuple[HttpEndpoint, Health]) -> None:
    server, _ = endpoint
    status, body = await request(server.port, "GET /metrics?x=1 HTTP/1.1")
    assert status == 200
    assert "probe_events_total 3.0" in body


async def test_unknown_path_and_method(endpoint: tuple[HttpEndpoint, Health]) -> None:
    server, _ = endpoint
    assert (await request(server.port, "GET /admin HTTP/1.1"))[0] == 404
    assert (await request(server.port, "POST /metrics HTTP/1.1"))[0] == 405
    assert await request(server.port, "GET /healthz HTTP/1.1") == (200, "ok\n")

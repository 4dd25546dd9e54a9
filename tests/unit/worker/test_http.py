"""The HTTP endpoint in-process: routes, readiness flag, method handling."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import pytest
from privstream.config.models import HttpConfig
from privstream.worker import Health, HttpEndpoint
from prometheus_client import CollectorRegistry, Counter

from tests.support.http_get import http_request


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


# --- a hostile client (issue 13): bounded size, time and connections, no tracebacks ------


async def raw_exchange(port: int, data: bytes, *, within_s: float = 10.0) -> bytes:
    """Send ``data`` on a raw socket and read until the server closes the connection.

    A connection reset (closed with our bytes unread) counts as closed: b"".
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), within_s)
    except ConnectionResetError:
        return b""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


async def test_http_binds_loopback_unless_told_otherwise() -> None:
    assert HttpConfig().host == "127.0.0.1"


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n",  # request line over the limit
        b"GET /metrics HTTP/1.1\r\nX: " + b"b" * 20_000 + b"\r\n\r\n",  # one huge header
    ],
)
async def test_oversized_requests_get_400_and_no_traceback(
    endpoint: tuple[HttpEndpoint, Health],
    caplog: pytest.LogCaptureFixture,
    request_bytes: bytes,
) -> None:
    server, _ = endpoint
    with caplog.at_level(logging.DEBUG):
        response = await raw_exchange(server.port, request_bytes)
        assert await http_request(server.port, "GET /healthz HTTP/1.1") == (200, "ok\n")
    assert status_of(response) == 400
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_too_many_header_bytes_in_small_lines_get_400(
    endpoint: tuple[HttpEndpoint, Health],
) -> None:
    server, _ = endpoint
    headers = b"".join(b"X-%d: %s\r\n" % (i, b"d" * 500) for i in range(100))  # ~50 KB
    response = await raw_exchange(server.port, b"GET /metrics HTTP/1.1\r\n" + headers + b"\r\n")
    assert status_of(response) == 400


async def test_a_request_that_never_ends_is_dropped_after_the_deadline(
    endpoint: tuple[HttpEndpoint, Health],
) -> None:
    server, _ = endpoint
    server.REQUEST_TIMEOUT_S = 0.3
    # one header line at a time would keep a per-line timeout alive forever
    assert await raw_exchange(server.port, b"GET /metrics HTTP/1.1\r\nX: 1\r\n") == b""


async def test_connections_beyond_the_cap_are_closed_unanswered(
    endpoint: tuple[HttpEndpoint, Health],
) -> None:
    server, _ = endpoint
    server.MAX_CONNECTIONS = 2
    # accepted in connect order, and each handler counts itself before its first await:
    # the two idle connections hold both places when the third one's handler runs
    idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
    assert await raw_exchange(server.port, b"GET /healthz HTTP/1.1\r\n\r\n") == b""
    for reader, writer in idle:  # the capped ones are still served
        writer.write(b"GET /healthz HTTP/1.1\r\n\r\n")
        response = await asyncio.wait_for(reader.read(), 10)
        assert status_of(response) == 200
        writer.close()
    # the server gave back its places before closing (the EOF each reader saw)
    assert await http_request(server.port, "GET /healthz HTTP/1.1") == (200, "ok\n")

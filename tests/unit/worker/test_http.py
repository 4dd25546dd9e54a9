"""The HTTP endpoint in-process: routes, readiness flag, method handling."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import time
from collections.abc import AsyncIterator

import pytest
from privstream.config.models import HttpConfig
from privstream.metrics import Metrics
from privstream.worker import Health, HttpEndpoint
from privstream.worker.http_limits import FD_RESERVE, connection_cap
from prometheus_client import CollectorRegistry, Counter

from tests.support.http_get import http_request


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[HttpEndpoint, Health]]:
    metrics = Metrics(CollectorRegistry())
    Counter("probe_events", "a test counter", registry=metrics.registry).inc(3)
    health = Health()
    server = HttpEndpoint(metrics, health, "127.0.0.1", 0)
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


def sample(server: HttpEndpoint, name: str) -> float:
    return server._metrics.registry.get_sample_value(name) or 0.0


def evicted(server: HttpEndpoint) -> float:
    return sample(server, "privstream_http_connections_evicted_total")


async def test_past_the_cap_the_oldest_connection_makes_room_for_the_new_one(
    endpoint: tuple[HttpEndpoint, Health],
) -> None:
    server, _ = endpoint
    server.max_connections = 2
    # accepted in connect order, and each handler counts itself before its first await;
    # an answered request proves the server has accepted the connections opened before it
    idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
    assert await http_request(server.port, "GET /healthz HTTP/1.1") == (200, "ok\n")
    # the probe took the oldest idle connection's place: that one was closed unanswered
    assert await asyncio.wait_for(idle[0][0].read(), 10) == b""
    assert evicted(server) == 1
    reader, writer = idle[1]  # the younger one still holds its place and is served
    writer.write(b"GET /healthz HTTP/1.1\r\n\r\n")
    assert status_of(await asyncio.wait_for(reader.read(), 10)) == 200
    for _, w in idle:
        w.close()


def renders(server: HttpEndpoint) -> float:
    return sample(server, "privstream_http_metrics_renders_total")


async def test_metrics_scrapes_share_one_render_per_interval(
    endpoint: tuple[HttpEndpoint, Health],
) -> None:
    server, _ = endpoint
    server.METRICS_MAX_AGE_S = 3600.0  # one interval spans the whole test
    server.METRICS_PER_S = 1e6  # no scrape waits for its turn here
    bodies = {(await http_request(server.port, "GET /metrics HTTP/1.1"))[1] for _ in range(20)}
    assert renders(server) == 1
    assert len(bodies) == 1  # the same cached body, which counts its own render
    assert "privstream_http_metrics_renders_total 1.0" in bodies.pop()
    server.METRICS_MAX_AGE_S = 0.0  # every scrape is past the interval: each renders
    for _ in range(3):
        await http_request(server.port, "GET /metrics HTTP/1.1")
    assert renders(server) == 4


async def test_scrapes_wait_their_turn_and_one_too_far_off_is_refused(
    endpoint: tuple[HttpEndpoint, Health],
) -> None:
    """Two scrapes a second, turns at most 0.6 s away: of five at once, the first is
    answered at once, the second 0.5 s later, the other three 503 after 0.6 s (a looping
    scraper is slowed down by its refusals too)."""
    server, _ = endpoint
    server.METRICS_PER_S, server.REQUEST_TIMEOUT_S = 2.0, 0.6
    started = time.monotonic()
    answers = await asyncio.gather(
        *(http_request(server.port, "GET /metrics HTTP/1.1") for _ in range(5))
    )
    assert sorted(status for status, _ in answers) == [200, 200, 503, 503, 503]
    assert time.monotonic() - started >= 0.6  # the refused waited, the second for its turn
    assert sample(server, "privstream_http_scrapes_refused_total") == 3
    # probes never wait for a turn
    assert await http_request(server.port, "GET /healthz HTTP/1.1") == (200, "ok\n")


def blocking_get(port: int, path: str) -> bytes:
    """A GET that needs no event loop: the caller's loop may be blocked."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\n\r\n".encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


async def test_probes_are_answered_while_the_worker_loop_is_blocked(
    endpoint: tuple[HttpEndpoint, Health],
) -> None:
    """The endpoint has its own thread: a blocked worker loop (this test's loop) does not
    keep the probe waiting, and /healthz says the loop is stalled once it has not run
    for ``STALL_S``; /readyz follows, whatever the broker flag."""
    server, health = endpoint
    health.ready = True
    server.STALL_S = 0.2
    started = time.monotonic()
    time.sleep(0.5)  # noqa: ASYNC251 -- the point: the loop (the heartbeat's) is stuck
    healthz, readyz = blocking_get(server.port, "/healthz"), blocking_get(server.port, "/readyz")
    assert time.monotonic() - started < 5.0  # answered from the server thread meanwhile
    assert status_of(healthz) == 503
    assert b"event loop stalled for" in healthz
    assert status_of(readyz) == 503
    server.STALL_S = 3600.0  # the loop runs again: the next heartbeat is fresh anyway
    assert await http_request(server.port, "GET /healthz HTTP/1.1") == (200, "ok\n")
    assert await http_request(server.port, "GET /readyz HTTP/1.1") == (200, "ready\n")


def test_the_connection_cap_fits_the_descriptor_limit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    limits = {"soft": 1024, "hard": 3000}
    monkeypatch.setattr(resource, "getrlimit", lambda _: (limits["soft"], limits["hard"]))

    def setrlimit(_: int, values: tuple[int, int]) -> None:
        limits["soft"] = values[0]

    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    # the soft limit is raised as far as the hard one allows
    assert connection_cap(4096) == 3000 - FD_RESERVE
    assert limits["soft"] == 3000
    assert not caplog.records
    limits.update(soft=10_000, hard=10_000)  # already enough: left alone
    assert connection_cap(4096) == 4096
    limits.update(soft=512, hard=512)  # cannot be raised: fewer connections, and a warning
    with caplog.at_level(logging.WARNING):
        assert connection_cap(4096) == 512 - FD_RESERVE
    assert "raise `ulimit -n`" in caplog.text
    monkeypatch.setattr(resource, "getrlimit", lambda _: (resource.RLIM_INFINITY,) * 2)
    assert connection_cap(4096) == 4096

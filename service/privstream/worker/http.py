"""A minimal HTTP endpoint for /metrics, /healthz and /readyz on asyncio.

Three fixed GET routes do not justify a web framework dependency.
``/healthz`` answers 200 while the event loop runs; ``/readyz`` answers 200
only while the Kafka clients are connected and consuming.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("privstream.http")


@dataclass
class Health:
    """Readiness flag flipped by the worker loop: True while a broker answers it.

    Set when a session's clients have started, then by the worker's probe (a
    small metadata request every second, 2 s to answer): it turns False at
    most 3 s after the brokers stop answering (about 1 s when connections are
    refused or reset) and at once when the session ends, and True again only
    after a round trip, at most 1 s after the broker answers again. An outage
    shorter than about a second can go unseen; aiokafka retries through it.
    """

    ready: bool = False


class HttpEndpoint:
    """Serves the registry and health flags; ``port`` 0 picks a free port.

    Bounded against a hostile client: at most ``MAX_CONNECTIONS`` at once
    (more are closed unanswered), a request line and each header line of at
    most ``MAX_LINE_BYTES``, at most ``MAX_HEADER_BYTES`` of headers, the
    whole request read within ``REQUEST_TIMEOUT_S`` and the answer written
    within as much again; a request that breaks a bound gets 400 (or
    nothing) and the connection is closed. No request ever logs a traceback.
    """

    MAX_CONNECTIONS = 32
    MAX_LINE_BYTES = 8192
    MAX_HEADER_BYTES = 32768
    REQUEST_TIMEOUT_S = 5.0

    def __init__(self, registry: CollectorRegistry, health: Health, host: str, port: int) -> None:
        self._registry = registry
        self._health = health
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self._open = 0

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"  # noqa: S101 -- programming error
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        # ``limit`` bounds each line readline() buffers (a longer one raises ValueError)
        self._server = await asyncio.start_server(
            self._handle, self._host, self._port, limit=self.MAX_LINE_BYTES
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _route(self, path: str) -> tuple[int, str, bytes]:
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self._registry)
        if path == "/healthz":
            return 200, "text/plain", b"ok\n"
        if path == "/readyz":
            if self._health.ready:
                return 200, "text/plain", b"ready\n"
            return 503, "text/plain", b"not ready\n"
        return 404, "text/plain", b"not found\n"

    async def _read_request(self, reader: asyncio.StreamReader) -> bytes:
        """The request line; the headers are read (bounded) and ignored."""
        request = await reader.readline()
        total = 0
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            total += len(line)
            if total > self.MAX_HEADER_BYTES:
                raise _BadRequest
        return request

    def _answer(self, request: bytes) -> tuple[int, str, bytes]:
        parts = request.decode("latin-1").split()
        path = parts[1].split("?")[0] if len(parts) >= 2 and parts[0] == "GET" else ""
        return self._route(path) if path else (405, "text/plain", b"GET only\n")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= self.MAX_CONNECTIONS:  # over the cap: closed unanswered
            writer.close()
            return
        self._open += 1
        try:
            try:
                async with asyncio.timeout(self.REQUEST_TIMEOUT_S):
                    request = await self._read_request(reader)
                answer = self._answer(request)
            except (ValueError, _BadRequest):  # a line over the limit, headers too large
                answer = (400, "text/plain", b"bad request\n")
            status, ctype, body = answer
            head = (
                f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            async with asyncio.timeout(self.REQUEST_TIMEOUT_S):
                await writer.drain()
        except Exception as exc:  # a slow, vanished or broken client: never a traceback
            log.debug("http client dropped (%s)", type(exc).__name__)
        finally:
            self._open -= 1
            writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.REQUEST_TIMEOUT_S):
                    await writer.wait_closed()


class _BadRequest(Exception):
    """The request breaks a size bound."""


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}

"""A minimal HTTP endpoint for /metrics, /healthz and /readyz on asyncio.

Three fixed GET routes do not justify a web framework dependency.
``/healthz`` answers 200 while the event loop runs; ``/readyz`` answers 200
only while the Kafka clients are connected and consuming.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


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
    """Serves the registry and health flags; ``port`` 0 picks a free port."""

    def __init__(self, registry: CollectorRegistry, health: Health, host: str, port: int) -> None:
        self._registry = registry
        self._health = health
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"  # noqa: S101 -- programming error
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)

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

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), timeout=5)
            while (await asyncio.wait_for(reader.readline(), timeout=5)) not in (
                b"\r\n",
                b"\n",
                b"",
            ):
                pass  # headers are not needed
            parts = request.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) >= 2 and parts[0] == "GET" else ""
            status, ctype, body = self._route(path) if path else (405, "text/plain", b"GET only\n")
            reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}.get(
                status, "Service Unavailable"
            )
            head = (
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

"""The /metrics, /healthz and /readyz endpoint, served from a thread of its own.

Three fixed GET routes do not justify a web framework dependency. The
endpoint runs its own asyncio loop in a daemon thread (issue 30): no client,
idle, slow or flooding, waits on the worker's event loop or makes it wait,
and a busy worker loop does not keep a probe waiting.

* ``/healthz`` answers 200 while the worker's event loop runs: that loop
  stamps a heartbeat every ``HEARTBEAT_S``, and a stamp older than
  ``STALL_S`` answers 503 (before, a stalled loop answered nothing).
* ``/readyz`` answers 200 while the Kafka clients are connected and
  consuming (``Health``) and the loop is not stalled.
* ``/metrics`` renders the registry on this thread, at most once per
  ``METRICS_MAX_AGE_S``: scrapes in between get the same body, so a flood
  renders it at most 10 times a second (``privstream_http_metrics_renders_total``;
  a render of the reference config takes about 1 ms). The body is at most
  0.1 s old: tests and operators that poll a counter see it move at once.
  And at most ``METRICS_PER_S`` scrapes are answered a second: more wait
  their turn, and one whose turn is more than ``REQUEST_TIMEOUT_S`` away gets
  503 after that long. Even from the cache a scrape costs the worker's
  process Python time (a connection, a parse, the GIL), and a scraper that
  loops asks again as soon as it is answered: so every answer, a refusal
  too, comes at a bounded rate, and a flood of looping scrapers costs about
  what ``METRICS_PER_S`` scrapes cost, not what the flooders can ask
  (refused at once, 64 of them cost a third of the throughput).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from privstream.metrics import Metrics
from privstream.worker.http_limits import connection_cap

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


Answer = tuple[int, str, bytes]


class HttpEndpoint:
    """Serves the registry and health flags; ``port`` 0 picks a free port.

    Bounded against a hostile client: a request line and each header line of
    at most ``MAX_LINE_BYTES``, at most ``MAX_HEADER_BYTES`` of headers, the
    whole request read within ``REQUEST_TIMEOUT_S`` and the answer written
    within as much again; a request that breaks a bound gets 400 (or
    nothing) and the connection is closed. At most ``max_connections`` are
    open (``MAX_CONNECTIONS``, fewer if the file descriptor limit says so):
    a new one past that closes the oldest, so idle sockets cannot lock a
    probe out (a probe is the newest connection). No request ever logs a
    traceback.
    """

    MAX_CONNECTIONS = 4096
    MAX_LINE_BYTES = 8192
    MAX_HEADER_BYTES = 32768
    REQUEST_TIMEOUT_S = 5.0
    #: a scrape gets a body rendered at most this long ago
    METRICS_MAX_AGE_S = 0.1
    #: scrapes answered a second, all clients together (Prometheus: one per 15 s or so)
    METRICS_PER_S = 10.0
    HEARTBEAT_S = 1.0
    #: the liveness probe fails when the worker's loop has not run for this long; the
    #: manifests' probe (3 failures 10 s apart) then restarts a loop stuck for ~30 s
    STALL_S = 10.0
    #: pending connections the kernel queues before accept (1,000 at once must not wait
    #: for a SYN retransmission, 1 s)
    BACKLOG = 1024

    def __init__(self, metrics: Metrics, health: Health, host: str, port: int) -> None:
        self._metrics = metrics
        self._health = health
        self._host = host
        self._port = port
        self.max_connections = self.MAX_CONNECTIONS
        self._open: OrderedDict[asyncio.StreamWriter, None] = OrderedDict()
        self._body: bytes | None = None
        self._rendered_at = 0.0
        self._next_turn = 0.0
        self._beat_at = time.monotonic()
        self._beat_handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"  # noqa: S101 -- programming error
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Start the heartbeat on the caller's (the worker's) loop and the server thread."""
        self.max_connections = connection_cap(self.MAX_CONNECTIONS)
        self._beat()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="privstream-http", daemon=True
        )
        self._thread.start()
        try:
            await self._on_thread(self._listen(), self._loop)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        if self._beat_handle is not None:
            self._beat_handle.cancel()
        loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):  # the server is gone either way
            await self._on_thread(self._shutdown(), loop)
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join)
        loop.close()

    @staticmethod
    async def _on_thread(coro: Coroutine[Any, Any, None], loop: asyncio.AbstractEventLoop) -> None:
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    def _beat(self) -> None:
        self._beat_at = time.monotonic()
        self._beat_handle = asyncio.get_running_loop().call_later(self.HEARTBEAT_S, self._beat)

    async def _listen(self) -> None:
        # ``limit`` bounds each line readline() buffers (a longer one raises ValueError)
        self._server = await asyncio.start_server(
            self._handle, self._host, self._port, limit=self.MAX_LINE_BYTES, backlog=self.BACKLOG
        )

    async def _shutdown(self) -> None:
        """On the server thread: stop listening, drop every client, end their handlers."""
        if self._server is not None:
            self._server.close()
        for writer in self._open:
            writer.transport.abort()
        me = asyncio.current_task()
        tasks = [task for task in asyncio.all_tasks() if task is not me]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- routes (on the server thread) ---------------------------------------------------

    async def _route(self, path: str) -> Answer:
        if path == "/metrics":
            if not await self._metrics_turn():
                self._metrics.http_scrapes_refused.inc()
                return 503, "text/plain", b"scraped too often\n"
            return 200, CONTENT_TYPE_LATEST, self._metrics_body()
        stalled = time.monotonic() - self._beat_at
        if path == "/healthz":
            if stalled > self.STALL_S:
                return 503, "text/plain", f"event loop stalled for {stalled:.0f} s\n".encode()
            return 200, "text/plain", b"ok\n"
        if path == "/readyz":
            if self._health.ready and stalled <= self.STALL_S:
                return 200, "text/plain", b"ready\n"
            return 503, "text/plain", b"not ready\n"
        return 404, "text/plain", b"not found\n"

    async def _metrics_turn(self) -> bool:
        """Wait for this scrape's turn (one per ``1 / METRICS_PER_S`` s); False, after
        ``REQUEST_TIMEOUT_S``, if it is further away than that (no turn is taken)."""
        now = time.monotonic()
        turn = max(now, self._next_turn)
        if turn - now > self.REQUEST_TIMEOUT_S:
            await asyncio.sleep(self.REQUEST_TIMEOUT_S)
            return False
        self._next_turn = turn + 1.0 / self.METRICS_PER_S
        if turn > now:
            await asyncio.sleep(turn - now)
        return True

    def _metrics_body(self) -> bytes:
        """The cached body, rendered again once it is ``METRICS_MAX_AGE_S`` old."""
        if self._body is None or time.monotonic() - self._rendered_at >= self.METRICS_MAX_AGE_S:
            self._metrics.http_metrics_renders.inc()  # before: this body counts itself
            self._body = generate_latest(self._metrics.registry)
            # stamped after the render: a render slower than the interval cannot make
            # every scrape render
            self._rendered_at = time.monotonic()
        return self._body

    # --- connections (on the server thread) ----------------------------------------------

    async def _read_request(self, reader: asyncio.StreamReader) -> bytes:
        """The request line; the headers are read (bounded) and ignored."""
        request = await reader.readline()
        total = 0
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            total += len(line)
            if total > self.MAX_HEADER_BYTES:
                raise _BadRequest
        return request

    async def _answer(self, request: bytes) -> Answer:
        parts = request.decode("latin-1").split()
        path = parts[1].split("?")[0] if len(parts) >= 2 and parts[0] == "GET" else ""
        return await self._route(path) if path else (405, "text/plain", b"GET only\n")

    def _admit(self, writer: asyncio.StreamWriter) -> None:
        """Count the connection in; past the cap, the oldest ones are closed unanswered."""
        while len(self._open) >= self.max_connections:
            oldest, _ = self._open.popitem(last=False)
            oldest.transport.abort()  # its handler reads EOF and ends without an answer
            self._metrics.http_connections_evicted.inc()
        self._open[writer] = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._admit(writer)
        try:
            try:
                async with asyncio.timeout(self.REQUEST_TIMEOUT_S):
                    request = await self._read_request(reader)
                if not request:  # closed (or evicted) before a request line: nobody to answer
                    return
                answer = await self._answer(request)
            except (ValueError, _BadRequest):  # a line over the limit, headers too large
                answer = (400, "text/plain", b"bad request\n")
            writer.write(_response(*answer))
            async with asyncio.timeout(self.REQUEST_TIMEOUT_S):
                await writer.drain()
            if answer[0] == 400:  # the client's bytes may be left unread
                await _linger(reader, writer)
        except Exception as exc:  # a slow, vanished or broken client: never a traceback
            log.debug("http client dropped (%s)", type(exc).__name__)
        finally:
            self._open.pop(writer, None)
            writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.REQUEST_TIMEOUT_S):
                    await writer.wait_closed()


#: how long and how much a 400's connection is drained before it is closed (``_linger``)
LINGER_S = 1.0
LINGER_BYTES = 1 << 20


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Shut our side, then discard what the client still sends (bounded), before closing:
    closing a socket with unread bytes resets the connection, and a reset makes the
    client's kernel drop the answer it has not read yet (a lingering close, as HTTP
    servers do after an error)."""
    if writer.can_write_eof():
        writer.write_eof()
    with contextlib.suppress(Exception):
        async with asyncio.timeout(LINGER_S):
            left = LINGER_BYTES
            while left > 0 and (chunk := await reader.read(min(left, 65_536))):
                left -= len(chunk)


def _response(status: int, ctype: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class _BadRequest(Exception):
    """The request breaks a size bound."""


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}

"""A TCP proxy between Kafka clients and a broker that injects network faults.

The broker advertises the proxy's port (``tests/support/broker.py``, ``advertised_port``),
so every connection a client opens after bootstrapping through the proxy goes
through it too. Faults, each for a given time (the fault's duration is what is
injected; nothing here waits for an event by sleeping):

* ``cut(down_s)``: every connection is reset (RST, as from a rebooted
  firewall or a dead node) and new ones are reset at once for ``down_s``;
* ``slow(latency_s, for_s)``: every chunk is delivered ``latency_s`` later,
  in order, in both directions (a delay line: throughput is kept);
* ``blackhole(for_s)``: nothing is delivered in either direction and new
  connections get no upstream; what was sent waits, as TCP retransmits
  would, and flows once the blackhole ends;
* ``on_request(api_key, fault)`` fires a fault when the next request with
  that Kafka API key arrives from a client, before it is forwarded: a cut
  drops that request, a blackhole holds it. So the fault hits the very
  request a test is about (a Produce, an EndTxn), not a lucky moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Self

#: Kafka API keys of the requests the tests fire faults on
PRODUCE = 0
END_TXN = 26


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream = upstream
        self.cut = False

    def reset(self) -> None:
        self.cut = True
        _reset(self.client)
        _reset(self.upstream)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST, not a FIN: the peer sees ``ConnectionResetError``."""
    with contextlib.suppress(OSError):
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class TcpProxy:
    """Listens on ``127.0.0.1:port`` and forwards to ``127.0.0.1:upstream_port``."""

    def __init__(self, port: int, upstream_port: int) -> None:
        self.port = port
        self.upstream_port = upstream_port
        #: requests seen from clients, by API key
        self.requests: Counter[int] = Counter()
        self.connections = 0
        self._latency_s = 0.0
        self._down_until = 0.0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._heal: dict[str, asyncio.TimerHandle] = {}
        self._links: set[_Link] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._triggers: dict[int, list[tuple[Callable[[], None], asyncio.Event]]] = {}

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for handle in self._heal.values():
            handle.cancel()
        self._flowing.set()
        for link in list(self._links):
            link.reset()
        for task in list(self._handlers):  # their pumps end on the reset; a connect may not
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    # --- faults --------------------------------------------------------------------------------

    @property
    def faulty(self) -> bool:
        """A fault is in force (down, slowed or black-holed)."""
        return bool(self._heal)

    def cut(self, down_s: float) -> None:
        for link in list(self._links):
            link.reset()
        self._down_until = self._now() + down_s
        self._after("down", down_s, lambda: None)

    def slow(self, latency_s: float, for_s: float) -> None:
        self._latency_s = latency_s
        self._after("slow", for_s, lambda: setattr(self, "_latency_s", 0.0))

    def blackhole(self, for_s: float) -> None:
        self._flowing.clear()
        self._after("blackhole", for_s, self._flowing.set)

    def on_request(self, api_key: int, fault: Callable[[], None]) -> asyncio.Event:
        """Fire ``fault`` on the next request with ``api_key``; the event is set once it fired."""
        fired = asyncio.Event()
        self._triggers.setdefault(api_key, []).append((fault, fired))
        return fired

    def _after(self, name: str, seconds: float, end: Callable[[], None]) -> None:
        def heal() -> None:
            del self._heal[name]
            end()

        if name in self._heal:
            self._heal[name].cancel()
        self._heal[name] = asyncio.get_running_loop().call_later(seconds, heal)

    def _fire(self, api_key: int) -> None:
        self.requests[api_key] += 1
        armed = self._triggers.get(api_key)
        if armed:
            fault, fired = armed.pop(0)
            fault()
            fired.set()

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    # --- forwarding ----------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            if self._now() < self._down_until:
                _reset(writer)
                return
            await self._flowing.wait()  # black-holed: the connect gets no upstream
            try:
                up_reader, up_writer = await asyncio.open_connection(
                    "127.0.0.1", self.upstream_port
                )
            except OSError:
                _reset(writer)
                return
            self.connections += 1
            link = _Link(writer, up_writer)
            self._links.add(link)
            try:
                await self._forward(link, reader, up_reader)
            finally:
                self._links.discard(link)
                link.reset()
        except asyncio.CancelledError:
            # only __aexit__ cancels: end quietly (asyncio's server callback chokes on a
            # cancelled handler)
            pass
        finally:
            self._handlers.discard(task)

    async def _forward(
        self, link: _Link, reader: asyncio.StreamReader, up_reader: asyncio.StreamReader
    ) -> None:
        """Both directions until either side closes or the link is cut."""
        pumps = [
            asyncio.create_task(self._pump(link, _requests(reader, self._fire), link.upstream)),
            asyncio.create_task(self._pump(link, _chunks(up_reader), link.client)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)

    async def _pump(
        self, link: _Link, source: AsyncIterator[bytes], dst: asyncio.StreamWriter
    ) -> None:
        """A delay line: a chunk is due ``latency`` after it arrived; a blackhole holds it."""
        line: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await line.get()
                if not data:
                    return
                await self._flowing.wait()
                await asyncio.sleep(max(0.0, due - self._now()))
                await self._flowing.wait()
                if link.cut:
                    return
                dst.write(data)
                await dst.drain()

        delivering = asyncio.create_task(deliver())
        try:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                async for data in source:
                    if link.cut:
                        return
                    line.put_nowait((self._now() + self._latency_s, data))
            line.put_nowait((0.0, b""))
            with contextlib.suppress(OSError):
                await delivering
        finally:
            delivering.cancel()
            await asyncio.gather(delivering, return_exceptions=True)


async def _requests(
    reader: asyncio.StreamReader, seen: Callable[[int], None]
) -> AsyncIterator[bytes]:
    """Kafka request frames (int32 size, then int16 API key, ...); ``seen`` gets each key."""
    while True:
        try:
            head = await reader.readexactly(4)
        except asyncio.IncompleteReadError:
            return
        body = await reader.readexactly(struct.unpack(">i", head)[0])
        seen(struct.unpack(">h", body[:2])[0])
        yield head + body


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while data := await reader.read(65536):
        yield data

"""A minimal HTTP/1.1 GET over asyncio, for the worker's endpoints."""

from __future__ import annotations

import asyncio


async def http_request(port: int, request_line: str) -> tuple[int, str]:
    """Send one request line (e.g. ``GET /metrics HTTP/1.1``); return (status, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{request_line}\r\nHost: localhost\r\n\r\n".encode())
    await writer.drain()
    response = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = response.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


async def http_get(port: int, path: str) -> tuple[int, str]:
    return await http_request(port, f"GET {path} HTTP/1.1")

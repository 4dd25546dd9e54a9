"""How the worker restarts a failed session: jittered backoff, the error in one line, and
a failed transaction noticed while the next batch is being prepared."""

from __future__ import annotations

import asyncio
import random  # csprng-ok: backoff jitter only, never noise
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


def describe(exc: BaseException) -> str:
    """``Name: message`` once (aiokafka's messages often start with their class name)."""
    name, text = type(exc).__name__, str(exc)
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"


class Backoff:
    """Exponential delays with full jitter, reset after a committed batch."""

    def __init__(self, initial_s: float = 0.2, cap_s: float = 30.0) -> None:
        self._initial = initial_s
        self._cap = cap_s
        self._next = initial_s

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._cap)
        return random.uniform(delay / 2, delay)  # noqa: S311 -- jitter, not noise

    def reset(self) -> None:
        self._next = self._initial


async def unless_failed(work: Awaitable[T], inflight: asyncio.Task[None] | None) -> T:
    """``work``'s result, unless the transaction in flight fails first: then its error is
    raised at once and ``work`` is cancelled (the session restarts either way).

    Preparing the next batch can wait on that very transaction: a ledger restore
    waits until no transaction on its changelog partitions is open, and one whose
    commit and abort both failed stays open until the broker expires it. Without
    this the session would notice its own failure only then.

    Cancelling ``work`` does not stop a thread it started (``asyncio.to_thread``):
    the thread runs on and its result goes to a cancelled future, never to a
    caller. The worker's one such thread, ``sanitize``, is pure: what it may share
    with the next session's (the plan, the derived keys, cached tables) is read
    only or memoised deterministically, so an overlap changes no byte.
    """
    if inflight is None:
        return await work
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait({task, inflight}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done() and (inflight.cancelled() or inflight.exception() is not None):
            await inflight  # raises its error
        return await task
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

"""``restart.unless_failed``: a transaction that fails while the next batch is prepared
ends the wait at once, and a preparation is never cut short otherwise.

Plain asyncio objects; events, not sleeps, decide what finishes first.
"""

from __future__ import annotations

import asyncio

import pytest
from privstream.worker.restart import unless_failed


class CommitFailed(Exception):
    pass


async def test_without_a_transaction_in_flight_it_is_the_work() -> None:
    async def work() -> int:
        return 7

    assert await unless_failed(work(), None) == 7


async def test_a_transaction_that_fails_first_ends_the_wait_and_cancels_the_work() -> None:
    never = asyncio.Event()  # the preparation waits on something that never comes
    cancelled = asyncio.Event()

    async def work() -> int:
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 1

    async def commit() -> None:
        raise CommitFailed("abort failed too")

    inflight = asyncio.create_task(commit())
    with pytest.raises(CommitFailed):
        await asyncio.wait_for(unless_failed(work(), inflight), 10)
    assert cancelled.is_set()


async def test_a_transaction_that_commits_first_lets_the_work_finish() -> None:
    committed, release = asyncio.Event(), asyncio.Event()

    async def work() -> int:
        await release.wait()
        return 3

    async def commit() -> None:
        committed.set()

    inflight = asyncio.create_task(commit())
    waiting = asyncio.create_task(unless_failed(work(), inflight))
    await committed.wait()
    await asyncio.wait({inflight})
    assert not waiting.done()  # the commit's success does not end the preparation
    release.set()
    assert await waiting == 3


async def test_work_that_finishes_first_is_returned_while_the_transaction_runs() -> None:
    hold = asyncio.Event()

    async def work() -> int:
        return 5

    async def commit() -> None:
        await hold.wait()

    inflight = asyncio.create_task(commit())
    assert await unless_failed(work(), inflight) == 5
    assert not inflight.done()  # left to the caller, which awaits it next
    hold.set()
    await inflight


async def test_a_work_error_is_raised_as_its_own() -> None:
    async def work() -> int:
        raise ValueError("bad batch")

    async def commit() -> None:
        await asyncio.Event().wait()

    inflight = asyncio.create_task(commit())
    with pytest.raises(ValueError, match="bad batch"):
        await unless_failed(work(), inflight)
    inflight.cancel()
    await asyncio.gather(inflight, return_exceptions=True)

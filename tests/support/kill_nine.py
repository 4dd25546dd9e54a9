"""The kill -9 loop of the fault tests (JSON and framed exactly-once, the ledger), shared.

``stream_with_kills`` streams the input into the topic while a worker runs,
kills it with SIGKILL once ``plan.thresholds[k]`` inputs are accounted for
(released or dead-lettered, committed) and restarts it with the same replica
id, hence the same transactional id: the restart aborts the killed worker's
open transaction. It then waits until every input is accounted for and stops
the last worker with SIGTERM.

What the loop guarantees, by construction rather than by timing:

* Every kill lands while the worker has a transaction open. At each new record
  of the watched topic (the output, or the ledger's changelog) read
  uncommitted, the loop freezes the worker (SIGSTOP) and asks the broker
  whether some partition of that topic has its last stable offset below its
  high watermark (``OpenTransactions``), twice in a row so that a commit in
  flight has the time to show; only then SIGKILL, else SIGCONT and wait for
  the next record. Only the current worker writes the topic, and it committed
  once since it started (the loop waits for that before it may kill), so the
  open transaction is its own and the restart aborts it. The one way to
  miss: a commit the worker sent just before it froze, completed by the
  coordinator after both looks.
* Every kill lands mid-stream. The loop paces the producer (``Pacer``): up to
  ``threshold + ahead`` inputs (never the last ``reserve`` chunks) while it
  waits for a threshold; then one more chunk each time all input produced so
  far is accounted for and no kill has landed; all of it after the last kill.
  An open transaction holds inputs not yet accounted for, so each kill's
  ``inputs`` is below the total; if the input runs out first, the loop fails
  saying so.

The producer also stays at most ``ahead`` inputs ahead of the accounted ones
(back-pressure on the output reader, no timer), so input keeps arriving
while the loop kills.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from tests.support.faults import Tail, free_port, metric, poll_until, source_of, stream
from tests.support.worker_proc import Message, WorkerProcess


@dataclass(frozen=True)
class KillPlan:
    """Where to kill and how to feed the input."""

    #: kill once this many inputs are accounted for, one kill per threshold
    thresholds: list[int]
    #: how many inputs there are
    total: int
    #: how far (in inputs) the producer may run ahead of the accounted ones
    ahead: int
    #: messages per produced chunk
    chunk: int = 1_000
    #: chunks held back until a threshold is reached, for the kill to land in
    reserve: int = 4

    def __post_init__(self) -> None:
        last, cap = max(self.thresholds), self.total - self.reserve * self.chunk
        assert last <= cap, (
            f"threshold {last} is past {cap} (total {self.total} less {self.reserve} reserve "
            f"chunks of {self.chunk}): lower the thresholds or the chunk"
        )

    def allowed_before(self, threshold: int) -> int:
        """Inputs the producer may send while the loop waits for ``threshold``."""
        whole_chunks = -(-(threshold + self.ahead) // self.chunk) * self.chunk
        return min(whole_chunks, self.total - self.reserve * self.chunk)


@dataclass
class KillRun:
    """What happened: the inputs' (partition, offset), every worker, and per kill the
    inputs accounted for at the kill, the kill attempts it took, the uncommitted records
    of the open transaction and the seconds to the next worker's first commit."""

    coords: list[tuple[int, int]]
    workers: list[WorkerProcess] = field(default_factory=list)
    kills: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0

    def kills_before(self, inputs: int) -> int:
        """How many kills hit while fewer than ``inputs`` inputs were accounted for."""
        return sum(1 for kill in self.kills if kill["inputs"] < inputs)


def kill_thresholds(total: int, kills: int, seed: int) -> list[int]:
    """One threshold drawn uniformly in each of ``kills`` strata of [4 %, 86 %] of ``total``."""
    rng = random.Random(seed)
    lo, hi = 0.04 * total, 0.86 * total
    width = (hi - lo) / kills
    return [int(lo + width * (k + rng.random())) for k in range(kills)]


class OpenTransactions:
    """The partitions of ``topic`` holding records of a transaction still open: their
    last stable offset (the end offset read_committed) is below their high watermark
    (read_uncommitted). Two group-less consumers stay open: a look is one round trip."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self._tps = [TopicPartition(topic, p) for p in range(partitions)]
        self._stable, self._high = (
            AIOKafkaConsumer(
                bootstrap_servers=bootstrap, isolation_level=level, enable_auto_commit=False
            )
            for level in ("read_committed", "read_uncommitted")
        )

    async def __aenter__(self) -> Self:
        await asyncio.gather(self._stable.start(), self._high.start())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(self._stable.stop(), self._high.stop())

    async def look(self) -> int:
        """How many records sit between the two offsets, over all partitions."""
        stable, high = await asyncio.gather(
            self._stable.end_offsets(self._tps), self._high.end_offsets(self._tps)
        )
        return sum(high[tp] - stable[tp] for tp in self._tps)


class Pacer:
    """How many inputs the producer may send so far; the kill loop raises it."""

    def __init__(self, total: int, wakes: asyncio.Condition) -> None:
        self.total, self.allowed, self._wakes = total, 0, wakes

    async def allow(self, inputs: int) -> None:
        self.allowed = max(self.allowed, min(inputs, self.total))
        async with self._wakes:  # the producer's gate waits on it
            self._wakes.notify_all()


async def stream_with_kills(
    bootstrap: str,
    kafka: dict[str, str],
    config: Path,
    messages: Sequence[Message],
    plan: KillPlan,
    *,
    logs: Path,
    identity: Callable[[ConsumerRecord], Hashable],
    watch: tuple[str, int] | None = None,
) -> KillRun:
    """Stream ``messages`` into ``kafka["input_topic"]``, killing the worker of ``config``
    at ``plan.thresholds`` inside a transaction open on ``watch`` (topic, partitions;
    default: the 4-partition output topic); ``identity`` names an output record (e.g.
    its ``seq``). Worker logs go to ``logs``/worker<k>.log."""
    t0 = time.perf_counter()
    run, wakes = KillRun(coords=[]), asyncio.Condition()
    topic, partitions = watch or (kafka["output_topic"], 4)
    producing: asyncio.Task[list[tuple[int, int]]] | None = None
    try:
        async with (
            Tail(bootstrap, kafka["output_topic"], identity=identity, wakes=wakes) as out,
            Tail(bootstrap, kafka["dead_letter_topic"], identity=source_of, wakes=wakes) as dead,
            contextlib.AsyncExitStack() as stack,
        ):
            loop = _Loop(plan, run, config, logs, out, dead, Pacer(plan.total, wakes))
            producing = asyncio.create_task(
                stream(
                    bootstrap,
                    kafka["input_topic"],
                    messages,
                    chunk=plan.chunk,
                    before_chunk=loop.gate,
                )
            )
            await loop.pacer.allow(plan.allowed_before(plan.thresholds[0]))
            worker = await loop.start_worker()
            # only once the worker wrote it: reading a missing topic has the broker create it
            unc = Tail(bootstrap, topic, isolation_level="read_uncommitted", wakes=wakes)
            await stack.enter_async_context(unc)
            probe = await stack.enter_async_context(OpenTransactions(bootstrap, topic, partitions))
            for threshold in plan.thresholds:
                await loop.pacer.allow(plan.allowed_before(threshold))
                await loop.reach(threshold, within_s=120)
                kill = await loop.kill_inside_a_transaction(worker, unc, probe)
                killed_at = time.perf_counter()
                worker = await loop.start_worker()
                run.kills.append({**kill, "first_commit_s": time.perf_counter() - killed_at})
            await loop.pacer.allow(plan.total)
            run.coords = await producing
            await loop.reach(plan.total, within_s=180)
            assert await worker.terminate() == 0, worker.log_text()[-5000:]
    finally:  # a failed wait must not leave a worker running after the test
        if producing is not None:
            producing.cancel()
        for leftover in run.workers:
            if leftover.alive:
                await leftover.kill()
    run.seconds = time.perf_counter() - t0
    return run


@dataclass
class _Loop:
    """The state the kill loop and the producer's gate share."""

    plan: KillPlan
    run: KillRun
    config: Path
    logs: Path
    out: Tail
    dead: Tail
    pacer: Pacer

    def accounted(self) -> int:
        return len(self.out.distinct) + len(self.dead.distinct)

    async def reach(self, inputs: int, within_s: float) -> None:
        what = f"{inputs} inputs released or dead-lettered"
        await self.out.wait_until(lambda: self.accounted() >= inputs, within_s, what)

    async def gate(self, start: int) -> None:
        """The chunk at ``start`` goes once the pacer allows it and at most ``ahead``
        inputs are not accounted for."""

        def may() -> bool:
            return start < self.pacer.allowed and self.accounted() >= start - self.plan.ahead

        await self.out.wait_until(may, 300, f"leave to produce input {start}")

    async def start_worker(self) -> WorkerProcess:
        """A worker (same replica id as all before) that has committed once."""
        worker = WorkerProcess(self.config, self.logs / f"worker{len(self.run.workers)}.log")
        port = free_port()
        await worker.start("--http-port", str(port))
        self.run.workers.append(worker)
        await poll_until(_committed_a_batch(worker, port), 120, f"a commit of {worker.log.name}")
        return worker

    async def kill_inside_a_transaction(
        self, worker: WorkerProcess, unc: Tail, probe: OpenTransactions
    ) -> dict[str, float]:
        """Try at each new uncommitted record; feed a chunk whenever the worker ran dry."""
        attempts = 0
        while True:
            mark = len(unc.records)

            def moved(mark: int = mark) -> bool:  # the worker wrote, or it has nothing left
                return len(unc.records) > mark or self.accounted() >= self.pacer.allowed

            await self.out.wait_until(moved, 60, "a new uncommitted record")
            if len(unc.records) > mark:
                attempts += 1
                if held := await open_while_paused(worker, probe):
                    inputs = self.accounted()
                    assert await worker.kill() == -signal.SIGKILL
                    return {"inputs": inputs, "attempts": attempts, "open": held}
            elif self.pacer.allowed < self.plan.total:
                await self.pacer.allow(self.pacer.allowed + self.plan.chunk)
            else:
                raise AssertionError(
                    f"the input ran out before kill {len(self.run.kills) + 1}: "
                    f"{attempts} attempts found no transaction open; raise plan.reserve"
                )


async def open_while_paused(worker: WorkerProcess, probe: OpenTransactions) -> int:
    """Pause ``worker``; if it has a transaction open (seen twice in a row), leave it
    paused and return the open records; else resume it and return 0."""
    assert worker.alive, worker.log_text()[-5000:]
    worker.pause()
    held = await probe.look() and await probe.look()
    if not held:
        worker.resume()
    return held


def _committed_a_batch(worker: WorkerProcess, port: int) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:  # records_in moves once a transaction has committed
        assert worker.alive, worker.log_text()[-5000:]
        return bool(await metric(port, "privstream_records_in_total"))

    return probe

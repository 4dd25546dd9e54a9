"""The kill -9 loop of the exactly-once tests (JSON and framed input), shared.

``stream_with_kills`` streams the input into the topic while a worker runs,
kills it with SIGKILL once the committed output reaches each threshold and
restarts it with the same replica id (hence the same transactional id: the
restart aborts the killed worker's open transaction), then waits for every
output and dead letter and stops the last worker with SIGTERM.

Kill points: ``kill_thresholds`` draws one threshold on the number of distinct
committed outputs uniformly in each of ``kills`` equal strata of [4 %, 86 %]
of the stream. Once a threshold is reached, the loop waits for the
read_uncommitted reader to see a new record that the read_committed reader
has not seen (a batch of a transaction being written) and kills the worker
right then, so that most kills land inside an open transaction. (Waiting for
any new record instead, four kills of the Avro test left 200 aborted copies,
one batch: its small transactions mostly committed within a fetch.) After
each restart the loop waits for the new worker's first commit (its
``privstream_records_in_total`` > 0) before it may kill again, so every kill
hits a worker that was running.

The producer streams the input concurrently, at most ``ahead`` good records
ahead of the committed output (back-pressure on the output reader, no
timer), so kills happen while input is still arriving.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import ConsumerRecord

from tests.support.faults import Tail, free_port, metric, poll_until, source_of, stream
from tests.support.worker_proc import Message, WorkerProcess


@dataclass(frozen=True)
class KillPlan:
    """Where to kill and how to feed the input."""

    #: kill once this many distinct outputs are committed, one kill per threshold
    thresholds: list[int]
    #: ``good_before[i]``: how many of the first i inputs come out (are not dead letters)
    good_before: list[int]
    #: how far (in outputs) the producer may run ahead of the committed output
    ahead: int
    #: messages per produced chunk
    chunk: int = 1_000

    @property
    def good(self) -> int:
        return self.good_before[-1]

    @property
    def bad(self) -> int:
        return len(self.good_before) - 1 - self.good


@dataclass
class KillRun:
    """What happened: the inputs' (partition, offset), every worker, and per kill the
    committed outputs seen at the kill and the seconds to the next worker's first commit."""

    coords: list[tuple[int, int]]
    workers: list[WorkerProcess] = field(default_factory=list)
    kills: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0

    def kills_before(self, outputs: int) -> int:
        """How many kills hit while fewer than ``outputs`` outputs were committed."""
        return sum(1 for kill in self.kills if kill["outputs"] < outputs)


def kill_thresholds(good: int, kills: int, seed: int) -> list[int]:
    """One threshold drawn uniformly in each of ``kills`` strata of [4 %, 86 %] of ``good``."""
    rng = random.Random(seed)
    lo, hi = 0.04 * good, 0.86 * good
    width = (hi - lo) / kills
    return [int(lo + width * (k + rng.random())) for k in range(kills)]


async def stream_with_kills(
    bootstrap: str,
    kafka: dict[str, str],
    config: Path,
    messages: Sequence[Message],
    plan: KillPlan,
    *,
    logs: Path,
    identity: Callable[[ConsumerRecord], Hashable],
) -> KillRun:
    """Stream ``messages`` into ``kafka["input_topic"]``, killing the worker of ``config``
    at ``plan.thresholds``; ``identity`` names an output record (e.g. its ``seq``).
    Worker logs go to ``logs``/worker<k>.log."""
    t0 = time.perf_counter()
    run = KillRun(coords=[])
    try:
        async with (
            Tail(bootstrap, kafka["output_topic"], identity=identity) as out,
            Tail(
                bootstrap,
                kafka["output_topic"],
                isolation_level="read_uncommitted",
                identity=identity,
            ) as unc,
            Tail(bootstrap, kafka["dead_letter_topic"], identity=source_of) as dead,
        ):

            async def gate(start: int) -> None:
                need = plan.good_before[start] - plan.ahead
                await out.wait_until(lambda: len(out.distinct) >= need, 180, f"{need} outputs")

            def uncommitted_after(mark: int) -> Callable[[], bool]:
                def seen() -> bool:  # a record past ``mark`` the committed reader has not seen
                    fresh = (identity(r) for r in unc.records[mark:])
                    return (
                        any(n not in out.distinct for n in fresh) or len(out.distinct) >= plan.good
                    )

                return seen

            producing = asyncio.create_task(
                stream(
                    bootstrap, kafka["input_topic"], messages, chunk=plan.chunk, before_chunk=gate
                )
            )
            worker, _ = await _start_worker(run, config, logs)
            for k, threshold in enumerate(plan.thresholds):
                await out.wait_distinct(threshold, within_s=120)
                # kill right after the next record of an open transaction shows up
                await unc.wait_until(
                    uncommitted_after(len(unc.records)), 60, "an uncommitted record"
                )
                at_kill = len(out.distinct)
                assert worker.alive, worker.log_text()[-5000:]
                assert await worker.kill() == -signal.SIGKILL
                killed_at = time.perf_counter()
                # same replica id, so the same transactional id: aborts the open transaction
                worker, port = await _start_worker(run, config, logs)
                # the next kill must hit a worker that got going; once all is out (a kill that
                # came too late, ``kills_before`` counts it out) there is nothing left to commit
                if at_kill < plan.good:
                    committed = _committed_a_batch(worker, port)
                    await poll_until(committed, 120, f"a commit after kill {k + 1}")
                since = time.perf_counter() - killed_at
                run.kills.append({"outputs": at_kill, "first_commit_s": since})
            run.coords = await producing
            await out.wait_distinct(plan.good, within_s=180)
            await dead.wait_distinct(plan.bad, within_s=60)
            assert await worker.terminate() == 0, worker.log_text()[-5000:]
    finally:  # a failed wait must not leave a worker running after the test
        for leftover in run.workers:
            if leftover.alive:
                await leftover.kill()
    run.seconds = time.perf_counter() - t0
    return run


async def _start_worker(run: KillRun, config: Path, logs: Path) -> tuple[WorkerProcess, int]:
    worker = WorkerProcess(config, logs / f"worker{len(run.workers)}.log")
    port = free_port()
    await worker.start("--http-port", str(port))
    run.workers.append(worker)
    return worker, port


def _committed_a_batch(worker: WorkerProcess, port: int) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:  # records_in moves once a transaction has committed
        assert worker.alive, worker.log_text()[-5000:]
        return bool(await metric(port, "privstream_records_in_total"))

    return probe

"""A worker frozen past the session timeout never commits what it lost (issue 30, item 1).

Workers "a" and "b" share a 4-partition input with the ledger on. Three
times, "a" is frozen with SIGSTOP while it works (a GC pause, a frozen VM):
the group drops it after ``session_timeout_ms`` and gives "b" every
partition; "b" restores the ledger and goes on charging the same subjects;
then "a" resumes (SIGCONT) with whatever it held: a batch fetched, charged or
half sent under the assignment it lost. Nothing of it may commit: not its
outputs (a second release of records "b" released), not its ledger records
(older, lower spending that would replace "b"'s in the compacted changelog,
so the next restore would admit subjects again), not its offsets.

Subjects come in blocks of fresh ones, four records each against a cap of
three, so the batches around a freeze hold subjects below their cap. The
check is the ledger model of ``ledger_support`` recomputed from the raw
input: every subject released exactly up to its cap (not over: a stale
restore; not under: a charge counted twice), no record twice in the
read_committed output, and the committed changelog restored equals the
model's spending.

The input is produced in phases: before each freeze (so "a" is at work),
during it (so "b" has records to take over) and after the last one (charged
from ledgers restored after "a" came back). "a" and "b" have different
replica ids, as a Deployment's random pod names would: the transactional id
fences nothing here, the group generation alone does. Before the fence
(aiokafka's TxnOffsetCommit v0) this test failed 3 runs of 3, with records
released twice.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from privstream.config import load_config
from privstream.kinds import build_plan
from privstream.ledger import LedgerPolicy

from tests.support.faults import (
    fault_topics,
    free_port,
    group_assignment,
    metric,
    poll_until,
)
from tests.support.ledger import (
    assert_changelog_is_the_ledger,
    assert_ledger_obeyed,
    body,
    expected_reasons,
    group_committed,
    outcome,
    record,
    running,
)
from tests.support.worker_proc import Message, WorkerProcess, produce, read_all, write_config

FREEZES = 3
#: fresh subjects per block; each gets PER_SUBJECT records, one over the cap of 3
BLOCK_SUBJECTS, PER_SUBJECT = 400, 4


def block_message(i: int) -> Message:
    """Input i: subject ``b<block>-s<k>``, the block's subjects interleaved."""
    block, k = divmod(i, BLOCK_SUBJECTS * PER_SUBJECT)
    key, value = record(i, f"b{block}-s{k % BLOCK_SUBJECTS}")
    return key, value, []


async def test_frozen_worker_commits_nothing_it_lost(kafka_bootstrap: str, tmp_path: Path) -> None:
    busy, during, tail = 1_500, 1_000, 1_000  # inputs: per try before a freeze, during, at the end
    kafka = await fault_topics(kafka_bootstrap, "ledger-frozen")
    overrides = {
        **kafka,
        "transactions": True,
        "max_batch_records": 200,
        "session_timeout_ms": 6_000,
        # a freeze inside a transaction ends by the broker aborting it: keep that short
        "transaction_timeout_ms": 15_000,
    }
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, overrides, body())
    a = WorkerProcess(config, tmp_path / "a.log", replica_id="a")
    b = WorkerProcess(config, tmp_path / "b.log", replica_id="b")
    port_a, port_b = free_port(), free_port()
    frozen_at: list[float] = []
    sent = 0

    async def send(count: int) -> None:
        nonlocal sent
        messages = [block_message(i) for i in range(sent, sent + count)]
        await produce(kafka_bootstrap, kafka["input_topic"], messages)
        sent += count

    def alive() -> None:
        for w in (a, b):
            assert w.alive, w.log_text()[-5000:]

    async def shares() -> list[list[int]]:
        alive()
        state, members = await group_assignment(kafka_bootstrap, kafka["group_id"])
        return members if state == "Stable" else []

    async def both_assigned() -> bool:
        members = await shares()
        return len(members) == 2 and all(members)

    async def b_owns_all() -> bool:
        return await shares() == [[0, 1, 2, 3]]

    def committed_over(base: float) -> Callable[[], Awaitable[bool]]:
        async def probe() -> bool:
            alive()
            return await group_committed(kafka_bootstrap, kafka["group_id"]) > base

        return probe

    async def at_work(k: int) -> None:
        """Input until "a" commits a batch of it (then it is likely to hold more). Right
        after a freeze "a" may still be rejoining and "b" take a whole try: then another."""
        seen = await metric(port_a, "privstream_records_in_total") or 0
        for _ in range(5):
            await send(busy)

            async def probe(target: int = sent) -> str | bool:
                alive()
                if (await metric(port_a, "privstream_records_in_total") or 0) > seen:
                    return "a at work"
                done = await group_committed(kafka_bootstrap, kafka["group_id"]) >= target
                return done and "all committed by b"

            if await poll_until(probe, 120, f"a at work or every input committed ({k})") == (
                "a at work"
            ):
                return
        raise AssertionError(f"a committed nothing of 5 tries ({k})")

    async with running(a, port_a), running(b, port_b):
        await poll_until(both_assigned, 60, "both workers assigned partitions")
        for k in range(FREEZES):
            await at_work(k)
            assert a.proc is not None
            a.proc.send_signal(signal.SIGSTOP)
            frozen_at.append(await group_committed(kafka_bootstrap, kafka["group_id"]))
            await poll_until(b_owns_all, 60, "the group gave b every partition", every_s=0.2)
            # b charges the same subjects on (a freeze inside a transaction holds b's
            # restore until the broker aborts it: transaction_timeout_ms)
            base = await group_committed(kafka_bootstrap, kafka["group_id"])
            await send(during)
            await poll_until(committed_over(base), 90, f"b took over and committed ({k})")
            a.proc.send_signal(signal.SIGCONT)
            await poll_until(both_assigned, 90, f"a back in the group after freeze {k}")
        await send(tail)  # charged from ledgers restored after the last freeze
        await poll_until(committed_over(sent - 1), 180, "every input committed")
        assert await a.terminate() == 0, a.log_text()[-5000:]
        assert await b.terminate() == 0, b.log_text()[-5000:]
    raw, outputs, letters = await outcome(kafka_bootstrap, kafka)
    summary = f"frozen with {frozen_at} inputs committed"
    expected = expected_reasons(raw, clock_ms=int(time.time() * 1000))
    reasons = assert_ledger_obeyed(raw, outputs, letters, expected, summary)
    assert set(reasons) <= {"budget_exhausted", "lifetime_exhausted"}, reasons
    changelog = await read_all(kafka_bootstrap, f"{kafka['input_topic']}-privstream-ledger", 4)
    changelog.sort(key=lambda r: (r.partition, r.offset))
    parsed = load_config(config)
    policy = LedgerPolicy.from_config(parsed, build_plan(parsed))
    assert_changelog_is_the_ledger(changelog, raw, expected, policy, parsed.kafka.group_id)

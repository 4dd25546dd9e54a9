"""Two workers in one group, one killed mid-stream: rebalance, no loss, no duplicate.

Workers "a" and "b" (different replica ids, hence transactional ids) share a
4-partition input. The input is produced once the broker reports both as
members with partitions (a lone fast worker would otherwise eat it all), and
only its first half until the kill. Once both have committed output (each
one's ``privstream_records_out_total`` on its own /metrics is > 0), "a" is
killed with SIGKILL right after the next output record shows up to a
read_uncommitted reader (or at once if the first half is all out), so it
may die with a transaction open. Nobody restarts it: the broker aborts its
transaction after ``transaction_timeout_ms`` (10 s), the group drops it
after ``session_timeout_ms`` (6 s), and "b" takes its partitions over from
their last committed offsets and gets the second half of the input.

Afterwards, read_committed: every input exactly once (public ``seq``; dead
letters by ``privstream-source``), every output byte-identical to
``replay_expected``; read_uncommitted: every copy, aborted ones included, is
the expected bytes too. "b" was never restarted: still alive at the end, and
SIGTERM stops it with exit code 0. Whether "a" died inside a transaction
depends on timing, so the test does not require aborted copies (the
kill -9 test does); it prints how many there were.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

from tests.support.faults import (
    Tail,
    assert_dead_once,
    assert_each_once,
    fault_topics,
    free_port,
    good_before,
    group_assignment,
    is_bad,
    metric,
    poll_until,
    read_to_end,
    seq_of,
    source_of,
    stream,
    telemetry_message,
)
from tests.support.worker_proc import (
    PRIVACY,
    TEST_SECRET,
    Message,
    WorkerProcess,
    read_all,
    replay_expected,
    write_config,
)

TOTAL = 20_000  # inputs; every 100th one is malformed
BATCH = 300
AHEAD = 4_000  # how far the producer may run ahead of the committed output
CHUNK = 500
HALF = TOTAL // 2  # inputs produced before the kill; the rest only after it
CANARY = "CANARY"
OUT_TOTAL = "privstream_records_out_total"


def message(i: int) -> Message:
    return telemetry_message(i, CANARY)


async def test_two_workers_one_killed_rebalance_exactly_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    t0 = time.perf_counter()
    kafka = await fault_topics(kafka_bootstrap, "rebalance")
    source_topic = kafka["input_topic"]
    overrides = {
        **kafka,
        "transactions": True,
        "max_batch_records": BATCH,
        "transaction_timeout_ms": 10_000,
        "session_timeout_ms": 6_000,
    }
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, overrides, PRIVACY)

    messages = [message(i) for i in range(TOTAL)]
    good_seqs = {i for i in range(TOTAL) if not is_bad(i)}
    good, bad = len(good_seqs), TOTAL - len(good_seqs)
    good_so_far = good_before(TOTAL)

    port_a, port_b = free_port(), free_port()
    victim = WorkerProcess(config, tmp_path / "a.log", replica_id="a")
    survivor = WorkerProcess(config, tmp_path / "b.log", replica_id="b")
    killed = asyncio.Event()
    async with (
        Tail(kafka_bootstrap, kafka["output_topic"], identity=seq_of) as out,
        Tail(kafka_bootstrap, kafka["output_topic"], isolation_level="read_uncommitted") as unc,
        Tail(kafka_bootstrap, kafka["dead_letter_topic"], identity=source_of) as dead,
    ):
        await victim.start("--http-port", str(port_a))
        await survivor.start("--http-port", str(port_b))

        async def both_assigned() -> bool:
            assert victim.alive, victim.log_text()[-5000:]
            assert survivor.alive, survivor.log_text()[-5000:]
            state, shares = await group_assignment(kafka_bootstrap, kafka["group_id"])
            return state == "Stable" and len(shares) == 2 and all(shares)

        # input only once both share the partitions: one fast worker could eat it all alone
        await poll_until(both_assigned, 60, "both workers assigned partitions")

        async def gate(start: int) -> None:
            need = good_so_far[start] - AHEAD
            await out.wait_until(lambda: len(out.distinct) >= need, 120, f"{need} outputs")
            if start >= HALF:  # the second half only after the kill: the kill is mid-stream
                await asyncio.wait_for(killed.wait(), 120)

        producing = asyncio.create_task(
            stream(kafka_bootstrap, source_topic, messages, chunk=CHUNK, before_chunk=gate)
        )

        async def both_produced() -> bool:
            assert victim.alive, victim.log_text()[-5000:]
            assert survivor.alive, survivor.log_text()[-5000:]
            return bool(await metric(port_a, OUT_TOTAL)) and bool(await metric(port_b, OUT_TOTAL))

        await poll_until(both_produced, 90, "both workers committed output")
        t_both = time.perf_counter() - t0
        # kill right after the next record of an open transaction shows up, or, if the
        # first half is all out already, right away
        mark, first_half = len(unc.records), good_so_far[HALF]
        await unc.wait_until(
            lambda: len(unc.records) > mark or len(out.distinct) >= first_half,
            60,
            "one more record",
        )
        at_kill = len(out.distinct)
        victim_out = await metric(port_a, OUT_TOTAL)
        assert await victim.kill() == -signal.SIGKILL
        killed.set()
        killed_at = time.perf_counter()
        coords = await producing
        await out.wait_distinct(good, within_s=120)
        await dead.wait_distinct(bad, within_s=60)
        t_rest = time.perf_counter() - killed_at
        assert survivor.alive, survivor.log_text()[-5000:]
        assert await survivor.terminate() == 0, survivor.log_text()[-5000:]
    t_all = time.perf_counter() - t0

    sanitized = await read_all(kafka_bootstrap, kafka["output_topic"], partitions=4)
    every_copy = await read_to_end(
        kafka_bootstrap, kafka["output_topic"], 4, isolation_level="read_uncommitted"
    )
    dead_letters = await read_all(kafka_bootstrap, kafka["dead_letter_topic"], partitions=2)
    expected = replay_expected(config, TEST_SECRET, source_topic, coords, [m[1] for m in messages])
    copies = Counter(seq_of(r) for r in every_copy)
    summary = (
        f"outputs at kill={at_kill} (victim had {victim_out}) committed={len(sanitized)} "
        f"copies={len(every_copy)} replayed seqs={sum(1 for c in copies.values() if c > 1)} "
        f"both_produced_s={t_both:.1f} rest_after_kill_s={t_rest:.1f} "
        f"total_s={t_all:.1f}"
    )
    print(summary)
    assert at_kill < good, f"the kill came after the stream ended; {summary}"

    assert_each_once(sanitized, good_seqs, expected, summary)
    differ = [seq_of(r) for r in every_copy if r.value != expected[seq_of(r)]]
    assert not differ, f"an aborted copy differs for seqs {differ[:20]}; {summary}"

    index_of = assert_dead_once(dead_letters, source_topic, coords, summary)
    assert all(r.value == messages[index_of[source_of(r)]][1] for r in dead_letters)

    for worker in (victim, survivor):
        assert CANARY not in worker.log_text(), f"{worker.log} holds a raw value"

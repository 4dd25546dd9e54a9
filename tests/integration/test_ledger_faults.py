"""The subject ledger through faults: no subject ever exceeds its cap.

kill -9 mid-transaction five times (the kill loop of ``kill_nine``), a
two-worker rebalance, a broker restart; each recomputes the ledger's
decisions from the raw input with ``ledger_support.expected_reasons`` and
compares them with what was committed.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from privstream.config import load_config
from privstream.kinds import build_plan
from privstream.ledger import LedgerPolicy

from tests.support.broker import LocalBroker, local_broker
from tests.support.faults import (
    Tail,
    fault_topics,
    free_port,
    group_assignment,
    metric,
    poll_until,
    read_to_end,
    samples,
)
from tests.support.http_get import http_get
from tests.support.kill_nine import KillPlan, stream_with_kills
from tests.support.ledger import (
    CAP,
    accounted_for,
    assert_changelog_is_the_ledger,
    assert_ledger_obeyed,
    body,
    expected_reasons,
    group_committed,
    outcome,
    produce_timed,
    record,
    running,
    seq,
    source,
    subject_message,
)
from tests.support.worker_proc import (
    TEST_SECRET,
    WorkerProcess,
    read_all,
    replay_expected,
    write_config,
)


async def test_kill_nine_five_times_no_subject_over_its_cap(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """kill -9 inside a transaction five times (the shared loop of ``kill_nine``: each
    kill while a changelog transaction of the worker is open, mid-stream); the restored
    ledger equals the committed one. In four runs (one beside the two other kill tests)
    every kill went in after 1 or 2 attempts; the three that counted them aborted 1,116
    to 1,210 changelog records, as many as the loop saw open at its kills."""
    total, kills, batch, ahead = 12_000, 5, 300, 3_000
    kafka = await fault_topics(kafka_bootstrap, "ledger-kill")
    overrides = {**kafka, "transactions": True, "max_batch_records": batch}
    overrides["session_timeout_ms"] = 6_000
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, overrides, body())
    changelog = f"{kafka['input_topic']}-privstream-ledger"
    messages = [subject_message(i) for i in range(total)]
    # kill points: one in each of `kills` equal strata of [5 %, 85 %] of the inputs
    thresholds = [int(total * (0.05 + 0.16 * k + 0.08)) for k in range(kills)]
    plan = KillPlan(thresholds, total, ahead=ahead, chunk=500)
    run = await stream_with_kills(
        kafka_bootstrap,
        kafka,
        config,
        messages,
        plan,
        logs=tmp_path,
        identity=seq,
        watch=(changelog, 4),
    )
    coords = run.coords
    summary = f"thresholds={thresholds} kills={run.kills}"
    print(summary)
    assert run.kills_before(total) == kills, summary
    raw, outputs, letters = await outcome(kafka_bootstrap, kafka)
    # every input was stamped within the last minutes: neither late nor in the future now
    expected = expected_reasons(raw, clock_ms=int(time.time() * 1000))
    reasons = assert_ledger_obeyed(raw, outputs, letters, expected, summary)
    assert set(reasons) <= {"budget_exhausted"}, reasons
    # the released bytes are the offline replay's: the kills changed no noise
    replay = replay_expected(
        config, TEST_SECRET, kafka["input_topic"], coords, [m[1] for m in messages]
    )
    assert all(r.value == replay[seq(r)] for r in outputs), summary
    # a batch a kill cut short left its changelog records aborted, not restored
    copies = await read_to_end(kafka_bootstrap, changelog, 4, isolation_level="read_uncommitted")
    committed_log = await read_all(kafka_bootstrap, changelog, 4)
    aborted = len(copies) - len(committed_log)
    print(f"{aborted} changelog records aborted")
    assert aborted > 0, f"no kill landed inside a transaction; {summary}"
    plan = build_plan(load_config(config))
    policy = LedgerPolicy.from_config(load_config(config), plan)
    committed_log.sort(key=lambda r: (r.partition, r.offset))
    assert_changelog_is_the_ledger(
        committed_log, raw, expected, policy, load_config(config).kafka.group_id
    )


async def test_rebalance_the_survivor_restores_the_victims_ledger(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Two workers; one killed once half the input is committed; the other takes its
    partitions over and must refuse every subject the victim had already filled
    (``over_budget: drop``: nothing over budget reaches the dead letters)."""
    subjects, per_subject = 1_000, 8
    total, half = subjects * per_subject, subjects * per_subject // 2
    kafka = await fault_topics(kafka_bootstrap, "ledger-rebalance")
    overrides = {
        **kafka,
        "transactions": True,
        "max_batch_records": 300,
        "transaction_timeout_ms": 10_000,
        "session_timeout_ms": 6_000,
    }
    config = write_config(
        tmp_path / "config.yaml", kafka_bootstrap, overrides, body(over_budget="drop")
    )
    messages = [(*record(i, f"s{i % subjects}"), None) for i in range(total)]
    victim = WorkerProcess(config, tmp_path / "a.log", replica_id="a")
    survivor = WorkerProcess(config, tmp_path / "b.log", replica_id="b")
    port_a, port_b = free_port(), free_port()

    def committed_at_least(count: int) -> Callable[[], Awaitable[bool]]:
        async def probe() -> bool:
            assert survivor.alive, survivor.log_text()[-5000:]
            return await group_committed(kafka_bootstrap, kafka["group_id"]) >= count

        return probe

    async with running(victim, port_a), running(survivor, port_b):

        async def both_assigned() -> bool:
            assert victim.alive, victim.log_text()[-5000:]
            state, shares = await group_assignment(kafka_bootstrap, kafka["group_id"])
            return state == "Stable" and len(shares) == 2 and all(shares)

        await poll_until(both_assigned, 60, "both workers assigned partitions")
        await produce_timed(kafka_bootstrap, kafka["input_topic"], messages[:half])
        await poll_until(committed_at_least(half), 60, "the first half committed")
        victim_out = await metric(port_a, "privstream_records_out_total")
        assert victim_out, "the victim released nothing: its ledger would be empty"
        assert await victim.kill() == -signal.SIGKILL
        await produce_timed(kafka_bootstrap, kafka["input_topic"], messages[half:])
        await poll_until(committed_at_least(total), 90, "everything committed")
        text = (await http_get(port_b, "/metrics"))[1]
        assert await survivor.terminate() == 0, survivor.log_text()[-5000:]
    raw, out, dead = await outcome(kafka_bootstrap, kafka)
    expected = expected_reasons(raw, clock_ms=int(time.time() * 1000))
    summary = f"victim released {victim_out}, {len(out)} released in all"
    reasons = assert_ledger_obeyed(raw, out, dead, expected, summary, dropped=True)
    assert dead == [], summary
    assert len(out) == subjects * CAP, summary  # nobody over, nobody under
    # the survivor refused the victim's subjects: its own count shows the drops
    dropped = samples(text)["privstream_ledger_suppressed_total", (("reason", "budget_exhausted"),)]
    assert 0 < dropped <= reasons["budget_exhausted"], (dropped, reasons)
    assert "restored" in survivor.log_text()


@pytest.fixture
def own_broker() -> Iterator[LocalBroker]:
    """A broker of this test only: stopping it must not disturb the session broker."""
    with local_broker() as running_broker:
        yield running_broker


async def test_broker_restart_no_subject_over_its_cap(
    own_broker: LocalBroker, tmp_path: Path
) -> None:
    """The broker stops mid-stream and comes back; the worker carries on by itself."""
    bootstrap, subjects, total = own_broker.bootstrap, 600, 6_000
    kafka = await fault_topics(bootstrap, "ledger-restart")
    port = free_port()
    overrides = {**kafka, "transactions": True, "max_batch_records": 100}
    overrides["transaction_timeout_ms"] = 10_000
    config = write_config(tmp_path / "config.yaml", bootstrap, overrides, body())
    messages = [(*record(i, f"s{i % subjects}"), None) for i in range(total)]
    await produce_timed(bootstrap, kafka["input_topic"], messages[: total // 2])
    worker = WorkerProcess(config, tmp_path / "worker.log")

    async def ready_is(status: int) -> bool:
        assert worker.alive, worker.log_text()[-5000:]
        return (await http_get(port, "/readyz"))[0] == status

    async with running(worker, port):
        await poll_until(lambda: metric(port, "privstream_records_in_total"), 60, "a commit")
        await asyncio.to_thread(own_broker.stop)
        await poll_until(lambda: ready_is(503), 60, "not ready", every_s=0.2)
        before = await metric(port, "privstream_records_in_total")
        assert before is not None and before < total // 2, "finished before the outage"
        await asyncio.to_thread(own_broker.start)  # same port, same data
        await poll_until(lambda: ready_is(200), 120, "ready again", every_s=0.2)
        await produce_timed(bootstrap, kafka["input_topic"], messages[total // 2 :])
        async with (
            Tail(bootstrap, kafka["output_topic"], identity=seq) as out_tail,
            Tail(bootstrap, kafka["dead_letter_topic"], identity=source) as dead_tail,
        ):
            await accounted_for(out_tail, dead_tail, total, worker, within_s=180)
        assert await worker.terminate() == 0, worker.log_text()[-5000:]
    raw, out, dead = await outcome(bootstrap, kafka)
    expected = expected_reasons(raw, clock_ms=int(time.time() * 1000))
    summary = f"{before} consumed before the outage, {len(out)} released"
    assert_ledger_obeyed(raw, out, dead, expected, summary)
    assert len(out) == subjects * CAP, summary

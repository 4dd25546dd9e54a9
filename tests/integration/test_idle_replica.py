"""A replica with no input partitions (more replicas than partitions) at a rebalance."""

from __future__ import annotations

from pathlib import Path

from tests.support.broker import create_topics
from tests.support.faults import free_port, poll_until
from tests.support.ledger import body
from tests.support.worker_proc import WorkerProcess, started, unique_topics, write_config


async def test_an_idle_replica_logs_info_and_no_error(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Two ledger workers on a one-partition topic: the second to join takes the partition
    or leaves it, and one of them is assigned none. Before (issue 30), that one's restore
    of no partition failed in a task nobody awaited: ERROR "Task exception was never
    retrieved" with a traceback at every rebalance."""
    kafka = unique_topics("idle")
    await create_topics(kafka_bootstrap, list(kafka.values())[:3], partitions=1)
    workers = []
    for i in range(2):
        http = {"host": "127.0.0.1", "port": free_port()}
        config = write_config(
            tmp_path / f"c{i}.yaml", kafka_bootstrap, kafka, {**body(), "http": http}
        )
        workers.append(WorkerProcess(config, tmp_path / f"w{i}.log", replica_id=str(i)))
    async with started(workers[0]), started(workers[1]):

        def idle() -> bool:
            return any("partitions assigned: none" in w.log_text() for w in workers)

        async def rebalanced() -> bool:
            assert all(w.alive for w in workers), [w.log_text()[-3000:] for w in workers]
            return idle()

        await poll_until(rebalanced, 120, "one replica assigned no partition")
        for worker in workers:
            assert await worker.terminate() == 0, worker.log_text()[-3000:]
    logs = [w.log_text() for w in workers]
    for log in logs:  # the exit flushes any never-retrieved task exception too
        bad = [line for line in log.splitlines() if " ERROR " in line or "Traceback" in line]
        assert not bad, bad
    assert any("no input partitions assigned: no ledger to restore" in log for log in logs)

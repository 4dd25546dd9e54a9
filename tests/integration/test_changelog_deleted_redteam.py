"""Red team: a ledger changelog deleted under a worker that has charged is re-created
empty at the next start, and every subject's budget starts again.

``topics.check_topics`` creates a missing changelog (``_create``, an INFO line),
whether the deployment is new or has run for months: the consumer group's
committed offsets on the input say records were already charged, yet nothing
tells the two apart. An operator's cleanup, a topic-retention tool or a mistyped
``kafka-topics --delete`` then gives every subject a second budget per window
(and lifetime), silently. Expected: the worker refuses to start (exit 2) when the
changelog is missing but the group has committed input offsets, or at least the
subjects stay within their cap.
"""

from __future__ import annotations

from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient

from tests.support.faults import Tail, fault_topics, free_port, poll_until
from tests.support.ledger import (
    CAP,
    body,
    outcome,
    produce_timed,
    record,
    running,
    seq,
    source,
)
from tests.support.worker_proc import WorkerProcess, write_config

SUBJECTS = 20


async def _run(config: Path, log: Path, kafka: dict[str, str], bootstrap: str, total: int) -> int:
    """Run a worker until ``total`` inputs are accounted for, or it exits by itself (2:
    refused at start); its exit code."""
    worker = WorkerProcess(config, log)
    async with (
        Tail(bootstrap, kafka["output_topic"], identity=seq) as out_tail,
        Tail(bootstrap, kafka["dead_letter_topic"], identity=source) as dead_tail,
        running(worker, free_port()),
    ):

        async def settled() -> bool:
            done = len(out_tail.distinct) + len(dead_tail.distinct) >= total
            return done or not worker.alive

        await poll_until(settled, 120, f"{total} inputs accounted for")
        if not worker.alive:
            return await worker.wait(within_s=5)
        return await worker.terminate()


async def test_a_deleted_changelog_does_not_restart_every_budget(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka = await fault_topics(kafka_bootstrap, "deleted-changelog")
    config = write_config(tmp_path / "c.yaml", kafka_bootstrap, kafka, body())
    first = [(*record(i, f"s{i % SUBJECTS}"), None) for i in range(SUBJECTS * CAP)]
    await produce_timed(kafka_bootstrap, kafka["input_topic"], first)
    assert await _run(config, tmp_path / "w1.log", kafka, kafka_bootstrap, len(first)) == 0

    changelog = f"{kafka['input_topic']}-privstream-ledger"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([changelog])

        async def gone() -> bool:
            return changelog not in await admin.list_topics()

        await poll_until(gone, 60, "the changelog deleted")
    finally:
        await admin.close()

    second = [(*record(len(first) + i, f"s{i % SUBJECTS}"), None) for i in range(SUBJECTS * CAP)]
    await produce_timed(kafka_bootstrap, kafka["input_topic"], second)
    code = await _run(config, tmp_path / "w2.log", kafka, kafka_bootstrap, len(first) + len(second))
    _, out, _ = await outcome(kafka_bootstrap, kafka)
    # refused (exit 2), or no subject released more than its cap in this hour's window
    assert code == 2 or len(out) <= SUBJECTS * CAP, (code, len(out))

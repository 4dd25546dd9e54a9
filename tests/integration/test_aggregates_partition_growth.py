"""The input topic gains partitions under the aggregates: the next session is refused.

Red team 13a (issue 34, finding 4): a subject's home partition depends on the input's
partition count, so a session under another count than the one the committed partials
were bounded with would count a subject whose home moved on two partitions. The first
transaction commits the count into the internal topic; a session that finds another is
refused (exit 2), naming both counts and the procedure (docs/aggregates.md, Adding
partitions).
"""

from __future__ import annotations

from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions

from tests.support import aggregate_stream as agg
from tests.support.aggregate_stream import running
from tests.support.faults import poll_until
from tests.support.worker_proc import WorkerProcess

GROWN = agg.PARTITIONS + 2


async def test_a_session_over_an_input_that_gained_partitions_is_refused(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka, _out, config = await agg.setup(kafka_bootstrap, tmp_path, "aggpartgrow", 1, 0)
    first = WorkerProcess(config, tmp_path / "first.log")
    await first.start()
    async with running(first):
        await poll_until(
            lambda: _count(kafka_bootstrap, kafka),
            60,
            "the partition count committed",
            every_s=0.2,
            why=lambda: first.log_text()[-3000:],
        )
        assert await first.terminate() == 0
    await _grow(kafka_bootstrap, kafka["input_topic"], GROWN)
    again = WorkerProcess(config, tmp_path / "again.log")
    await again.start()
    async with running(again):
        assert await again.wait(90) == 2, again.log_text()[-3000:]
    text = again.log_text()
    assert f"over {agg.PARTITIONS} input partitions, and the input has {GROWN} now" in text
    assert "docs/aggregates.md, Adding partitions" in text
    assert (await agg.view(kafka_bootstrap, kafka)).partitions == agg.PARTITIONS


async def _count(bootstrap: str, kafka: dict[str, str]) -> bool:
    return (await agg.view(bootstrap, kafka)).partitions == agg.PARTITIONS


async def _grow(bootstrap: str, topic: str, total: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_partitions({topic: NewPartitions(total_count=total)})
    finally:
        await admin.close()

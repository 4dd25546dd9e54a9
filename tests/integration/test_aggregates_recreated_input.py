"""The input topic deleted and re-created under the aggregates: the next session is refused.

Red team 14a (issue 34, finding 6): the internal topic keeps the old input's committed
read clock; the new input's records below its read end would be taken for a replay
whose clock was pruned and left out, silently, while their offsets are committed. A
session that finds an input partition ending before that read end is refused (exit 2),
naming the topic, the partition and the procedure (docs/aggregates.md, Adding
partitions).
"""

from __future__ import annotations

from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient

from tests.support import aggregate_stream as agg
from tests.support.aggregate_stream import running
from tests.support.broker import create_topics
from tests.support.faults import poll_until
from tests.support.worker_proc import WorkerProcess


async def test_a_session_over_a_recreated_input_is_refused(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka, _out, config = await agg.setup(kafka_bootstrap, tmp_path, "aggrecreate", 1, 0)
    first = WorkerProcess(config, tmp_path / "first.log")
    await first.start()
    async with running(first):
        await agg.produce_window(kafka_bootstrap, kafka["input_topic"], range(40))
        await poll_until(
            lambda: _clocked(kafka_bootstrap, kafka),
            90,
            "the read clocks committed past the records",
            every_s=0.2,
            why=lambda: first.log_text()[-3000:],
        )
        assert await first.terminate() == 0
    await _recreate(kafka_bootstrap, kafka["input_topic"])
    again = WorkerProcess(config, tmp_path / "again.log")
    await again.start()
    async with running(again):
        assert await again.wait(90) == 2, again.log_text()[-3000:]
    text = again.log_text()
    assert f"input topic {kafka['input_topic']!r} partition" in text, text[-3000:]
    assert "was deleted and re-created" in text and "Adding partitions" in text


async def _clocked(bootstrap: str, kafka: dict[str, str]) -> bool:
    clocks = (await agg.view(bootstrap, kafka)).clocks
    return len(clocks) == agg.PARTITIONS and all(c.read > 0 for c in clocks.values())


async def _recreate(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])

        async def gone() -> bool:
            return topic not in await admin.list_topics()

        await poll_until(gone, 60, f"topic {topic} deleted", every_s=0.2)
    finally:
        await admin.close()
    await create_topics(bootstrap, [topic], partitions=agg.PARTITIONS)

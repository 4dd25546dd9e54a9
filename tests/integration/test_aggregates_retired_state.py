"""The aggregates' state retired (docs/aggregates.md, Adding partitions), then started again.

Red team 14a (issue 34, finding 3): the retired state's ``released`` markers are
deleted with its internal topic, so a new state that started at the window holding
its epoch would rest on the two workers' clocks agreeing within the grace. The new
state reads the aggregates' output topic while nothing has closed; finding records
there, it starts each aggregate a window and a grace past its epoch. Here: the
start committed is exactly that one, and no (aggregate, window, group) is released
twice.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from aiokafka.admin import AIOKafkaAdminClient
from privstream.aggregates.windows import aligned_up

from tests.support import aggregate_stream as agg
from tests.support.aggregate_stream import running
from tests.support.faults import poll_until
from tests.support.worker_proc import WorkerProcess, read_all

SIZE_S, GRACE_S = 1, 2


async def test_a_new_state_after_a_retired_one_starts_past_a_window_and_a_grace(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka, out, config = await agg.setup(kafka_bootstrap, tmp_path, "aggretire", SIZE_S, GRACE_S)
    first = WorkerProcess(config, tmp_path / "first.log")
    await first.start()
    async with running(first):
        await agg.produce_window(kafka_bootstrap, kafka["input_topic"], range(30))
        await poll_until(
            lambda: _released(kafka_bootstrap, kafka),
            90,
            "a window released by the first state",
            every_s=0.2,
            why=lambda: first.log_text()[-3000:],
        )
        assert await first.terminate() == 0
    # retired: the internal topic deleted, the group gone (a new group_id: no offsets)
    await _delete_topic(kafka_bootstrap, agg.internal_topic(kafka))
    body = yaml.safe_load(config.read_text())
    body["kafka"]["group_id"] += ".again"
    body["kafka"]["transactional_id_prefix"] += ".again"
    again_config = tmp_path / "again.yaml"
    again_config.write_text(yaml.safe_dump(body))
    again = WorkerProcess(again_config, tmp_path / "again.log")
    await again.start()
    async with running(again):
        await agg.produce_window(kafka_bootstrap, kafka["input_topic"], range(30, 60))
        new = await poll_until(
            lambda: _released(kafka_bootstrap, kafka),
            90,
            "a window released by the new state",
            every_s=0.2,
            why=lambda: again.log_text()[-3000:],
        )
        assert await again.terminate() == 0
    assert new.epoch_ms is not None
    for name in ("by_os", "mean_latency"):
        size, grace = SIZE_S * 1000, GRACE_S * 1000
        assert new.starts[name].start == aligned_up(new.epoch_ms + size + grace, size)
    copies = agg.released(await read_all(kafka_bootstrap, out, 1))
    twice = [key for key, values in copies.items() if len(values) > 1]
    assert copies and not twice, f"released twice: {twice[:3]}"


async def _released(bootstrap: str, kafka: dict[str, str]) -> agg.View | None:
    view = await agg.view(bootstrap, kafka)
    return view if view.released.get("by_os") else None


async def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])

        async def gone() -> bool:
            return topic not in await admin.list_topics()

        await poll_until(gone, 60, f"topic {topic} deleted", every_s=0.2)
    finally:
        await admin.close()

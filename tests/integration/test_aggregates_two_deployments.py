"""Two deployments (two ``kafka.group_id``) of aggregates over one input topic.

First written by red team 12b (issue 34, finding 2). The internal topic is named
after the input topic only (``<input>-privstream-aggregates``); without a marker
each deployment would release every window from its own view, twice, with
independent noise (another ``epsilon``: another release id). Each deployment
writes its marker into the topic, and the second one is refused (exit 2, as the
ledger's ``ChangelogError``), naming both groups: no window is released twice.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition

from tests.support import aggregate_stream as agg
from tests.support.aggregate_stream import running
from tests.support.faults import Tail, poll_until
from tests.support.worker_proc import WorkerProcess

WINDOWS, PER_WINDOW = 3, 20


async def test_a_second_deployment_never_releases_a_window_again(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka, out, config_a = await agg.setup(kafka_bootstrap, tmp_path, "agg2dep", 1, 0)
    body = yaml.safe_load(config_a.read_text())
    body["kafka"]["group_id"] += ".b"
    body["kafka"]["transactional_id_prefix"] += ".b"
    for aggregate in body["aggregates"]:
        aggregate["epsilon"] = 2.0  # a second pipeline at another epsilon
    config_b = tmp_path / "config-b.yaml"
    config_b.write_text(yaml.safe_dump(body))
    first = WorkerProcess(config_a, tmp_path / "a.log")
    second = WorkerProcess(config_b, tmp_path / "b.log")
    await first.start()
    async with running(first), Tail(kafka_bootstrap, out) as rows:
        await poll_until(
            lambda: _epoch(kafka_bootstrap, kafka), 60, "the epoch committed", every_s=0.2
        )
        await second.start()
        async with running(second):
            group_b = f"{body['kafka']['group_id']}.aggregates"
            await poll_until(
                lambda: _started_or_gone(kafka_bootstrap, kafka, group_b, second),
                90,
                "the second deployment committed or exited",
                every_s=0.2,
                why=lambda: second.log_text()[-3000:],
            )
            for k in range(WINDOWS):
                index = range(k * PER_WINDOW, (k + 1) * PER_WINDOW)
                await agg.produce_window(kafka_bootstrap, kafka["input_topic"], index)
            await poll_until(
                lambda: _refused_or_twice(rows, second),
                120,
                "a refusal or a duplicate",
                every_s=0.2,
                why=lambda: second.log_text()[-3000:],
            )
            twice = _twice(rows)
            assert twice == {}, (
                f"{len(twice)} (aggregate, window, group) rows released twice, with different "
                f"values by two deployments, e.g. {sorted(twice.items())[:2]}"
            )
            assert await second.wait(60) == 2
            group_a = body["kafka"]["group_id"][: -len(".b")]
            assert f"also used by deployment (kafka.group_id) {group_a!r}" in second.log_text()
            assert first.alive, "the first deployment goes on"


async def _refused_or_twice(rows: Tail, worker: WorkerProcess) -> bool:
    return not worker.alive or _twice(rows) != {}


def _twice(rows: Tail) -> dict:
    return {k: v for k, v in agg.released(rows.records).items() if len(v) > 1}


async def _epoch(bootstrap: str, kafka: dict[str, str]) -> int | None:
    return (await agg.view(bootstrap, kafka)).epoch_ms


async def _started_or_gone(
    bootstrap: str, kafka: dict[str, str], group: str, worker: WorkerProcess
) -> bool:
    if not worker.alive:
        return True
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        wanted = [TopicPartition(kafka["input_topic"], p) for p in range(agg.PARTITIONS)]
        committed = await admin.list_consumer_group_offsets(group, partitions=wanted)
    finally:
        await admin.close()
    return any(meta.offset >= 0 for meta in committed.values())

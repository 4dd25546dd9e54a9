"""Red team 12b: two deployments (two ``kafka.group_id``) of aggregates over one input topic.

Expected to FAIL on main at 7ff56f4 (a finding, not a fix). The internal topic is
named after the input topic only (``<input>-privstream-aggregates``), its keys hold no
deployment, and nothing refuses a second group on it (the ledger's changelog has the
``D`` marker for exactly this; the aggregates have none). A releaser that owns every
input partition never re-reads the internal topic after its restart
(``_Step._release`` refreshes only with ``len(assigned) < partitions``), so each
deployment releases every window from its own view: every window twice. With a
different ``epsilon`` (a different release id, ``KeyedCells``) the two copies carry
independent noise over the same records: the window costs the sum of both epsilons.
The expected behaviour: the second deployment is refused (exit 2, as the ledger's
``ChangelogError``), or at least no window is released twice.
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition
from privstream.aggregates.windows import window_start

from tests.support import aggregate_stream as agg
from tests.support.aggregate_stream import running
from tests.support.faults import Tail, poll_until
from tests.support.worker_proc import WorkerProcess

AHEAD_MS = 300_000  # windows close by event time only: no record is ever late
WINDOWS, PER_WINDOW = 3, 20


async def test_a_second_deployment_never_releases_a_window_again(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka, out, config_a = await agg.setup(kafka_bootstrap, tmp_path, "agg2dep", 1, 0, 2)
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
            base = window_start(int(time.time() * 1000) + AHEAD_MS, 1000)
            for k in range(WINDOWS):
                stamps = [base + k * 1000 + j * (1000 // PER_WINDOW) for j in range(PER_WINDOW)]
                index = range(k * PER_WINDOW, (k + 1) * PER_WINDOW)
                await agg.produce_to(kafka_bootstrap, kafka["input_topic"], index, stamps)
            closing = base + WINDOWS * 1000
            await agg.produce_each(kafka_bootstrap, kafka["input_topic"], 999, closing)
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

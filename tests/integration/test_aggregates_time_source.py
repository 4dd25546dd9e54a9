"""A changed ``window.time`` is refused over a real broker (red team 14b, F1).

The first deployment counts under the Kafka timestamp and records it in the
internal topic; stopped (every replica, as the docs once advised) and started
again with ``window.time: seen_at``, it exits 2 before writing anything, naming
the aggregate, both time sources and the fix: under the new source a record
already released could fall in another window and be released again.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.support import aggregate_stream as agg
from tests.support.aggregate_stream import running
from tests.support.faults import poll_until
from tests.support.worker_proc import WorkerProcess

KAFKA_SOURCE = ("by_os", "kafka")
FIELD_SOURCE = ("by_os", "field:seen_at:ms:false")


async def test_a_changed_time_source_is_refused_at_start(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka, _, config = await agg.setup(kafka_bootstrap, tmp_path, "aggsrc", 2, 1)
    first = WorkerProcess(config, tmp_path / "a.log")
    await first.start()
    async with running(first):
        await poll_until(
            lambda: _holds(kafka_bootstrap, kafka, KAFKA_SOURCE),
            60,
            "the Kafka time source recorded",
            every_s=0.2,
            why=lambda: first.log_text()[-3000:],
        )
        assert await first.terminate() == 0
    body = yaml.safe_load(config.read_text())
    body["fields"].append(agg.TIME_FIELD)
    for aggregate in body["aggregates"]:
        aggregate["window"]["time"] = "seen_at"
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(body))
    second = WorkerProcess(changed, tmp_path / "b.log")
    await second.start()
    async with running(second):
        assert await second.wait(90) == 2
    log = second.log_text()
    assert (
        "aggregate 'by_os' counts records under window.time 'seen_at' (epoch_unit ms, "
        "assume_utc false), while this aggregate counted them under the Kafka timestamp"
    ) in log
    assert "Changing the time source" in log
    assert FIELD_SOURCE not in (await agg.view(kafka_bootstrap, kafka)).times


async def _holds(bootstrap: str, kafka: dict[str, str], pair: tuple[str, str]) -> bool:
    return pair in (await agg.view(bootstrap, kafka)).times

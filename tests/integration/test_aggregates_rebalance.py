"""Two workers share the aggregates, then one leaves: every window released exactly once.

Worker A starts alone; worker B joins (each then owns one input partition in
the aggregates' group: the test waits for that split), so windows close on
two workers and the owner of partition 0 releases them from the other's
progress, read from the internal topic; A is then stopped (SIGTERM) and B
owns both. Records are stamped in the wall clock's next window and the
grace (20 s) is longer than a rebalance, so no record is late (as in the
kill -9 test of ``test_aggregates_stream``): the committed rows must be, once
each, the bytes the file-mode pieces make of the input with the same key.
"""

from __future__ import annotations

from pathlib import Path

from privstream.aggregates.windows import window_label, window_start

from tests.support import aggregate_stream as agg
from tests.support.faults import Tail, group_assignment, poll_until
from tests.support.worker_proc import WorkerProcess, read_all

PER_WINDOW = 40
WINDOWS = 8
GRACE_S = 20


async def test_two_workers_then_one_release_each_window_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka, out, config = await agg.setup(kafka_bootstrap, tmp_path, "aggrebal", 1, GRACE_S)
    config = agg.with_kafka(config, {"session_timeout_ms": 6000})
    first = WorkerProcess(config, tmp_path / "a.log", replica_id="a")
    second = WorkerProcess(config, tmp_path / "b.log", replica_id="b")
    topic = kafka["input_topic"]

    starts: list[int] = []

    async def window(k: int) -> None:
        index = range(k * PER_WINDOW, (k + 1) * PER_WINDOW)
        starts.append(await agg.produce_window(kafka_bootstrap, topic, index))

    async def released(k: int) -> bool:
        labels = {row[1] for row in agg.released(rows.records)}
        return window_label(starts[k], 1000) in labels

    async def split() -> bool:
        state, shares = await group_assignment(kafka_bootstrap, f"{kafka['group_id']}.aggregates")
        return state == "Stable" and sorted(shares) == [[0], [1]]

    await first.start()
    async with agg.running(first), agg.running(second), Tail(kafka_bootstrap, out) as rows:
        epoch = await poll_until(lambda: _epoch(kafka_bootstrap, kafka), 60, "the epoch")
        for k in range(3):
            await window(k)
        await poll_until(lambda: released(1), 90, "window 1 released by A alone")
        await second.start()
        await poll_until(split, 90, "one partition each", every_s=0.2)
        for k in range(3, 6):
            await window(k)
        await poll_until(
            lambda: released(4),
            90,
            "window 4 released by two workers",
            why=lambda: first.log_text()[-2000:] + second.log_text()[-2000:],
        )
        assert await first.terminate() == 0
        for k in range(6, WINDOWS):
            await window(k)
        await poll_until(
            lambda: released(WINDOWS - 1),
            120,
            "the last window released by B alone",
            why=lambda: second.log_text()[-3000:],
        )
    every_start = list(range(window_start(epoch, 1000), starts[-1] + 1000, 1000))
    inputs = await read_all(kafka_bootstrap, topic, agg.PARTITIONS)
    expected = agg.expected(config, inputs, every_start, 1)
    labels = {window_label(s, 1000) for s in every_start}
    committed = {k: v for k, v in agg.released(rows.records).items() if k[1] in labels}
    assert set(committed) == set(expected)
    assert all(len(v) == 1 for v in committed.values()), "a window released twice"
    assert {k: v[0] for k, v in committed.items()} == expected


async def _epoch(bootstrap: str, kafka: dict[str, str]) -> int | None:
    return (await agg.view(bootstrap, kafka)).epoch_ms

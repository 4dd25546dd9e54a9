"""`privstream run` with aggregates, on a real broker: every window released once.

The input has two partitions; records go to partition 0 only, so partition 1
is idle (windows close by the wall clock on both alike). Windows of 2 s with
3 s of grace. Records carry Kafka timestamps a few seconds ahead of the wall
clock, ascending, so they are never late; one record is then written into a
window already closed (past its end and grace) and must be left out. Every
window from the epoch's to the last record's is released exactly once, and
its rows are byte for byte what the file-mode pieces make of the same
records with the same noise key (``tests.support.aggregate_stream.expected``).
"""

from __future__ import annotations

import datetime
import functools
import json
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer, ConsumerRecord
from privstream.aggregates.windows import window_label, window_start

from tests.support import aggregate_stream as agg
from tests.support.aggregate_stream import running
from tests.support.broker import create_topics
from tests.support.faults import Tail, free_port, poll_until, scrape_until
from tests.support.kill_nine import OpenTransactions, open_while_paused
from tests.support.worker_proc import Collector, WorkerProcess, produce, read_all

SIZE_S, GRACE_S = 2, 3
SIZE = SIZE_S * 1000
RECORDS = 120


async def test_windows_released_once_matching_file_mode(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka, out, config = await agg.setup(kafka_bootstrap, tmp_path, "aggstream", SIZE_S, GRACE_S)
    worker, port = WorkerProcess(config, tmp_path / "worker.log"), free_port()
    await worker.start("--http-port", str(port))
    async with running(worker), Collector(kafka_bootstrap, out) as rows:
        epoch = await poll_until(
            lambda: _epoch(kafka_bootstrap, kafka),
            60,
            "the epoch committed",
            every_s=0.2,
            why=lambda: worker.log_text()[-3000:],
        )
        base = window_start(int(time.time() * 1000), SIZE) + 2 * SIZE
        stamps = [base + i * (3 * SIZE) // RECORDS for i in range(RECORDS)]
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        await producer.start()
        try:
            for i, ts in enumerate(stamps):
                await producer.send(
                    kafka["input_topic"], agg.record(i), partition=0, timestamp_ms=ts
                )
            await producer.flush()
            first = window_start(stamps[0], SIZE)
            # the first window is closed on partition 0 by the wall clock
            await poll_until(
                lambda: _closed(kafka_bootstrap, kafka, first + SIZE), 60, "window closed"
            )
            late = await producer.send_and_wait(
                kafka["input_topic"], agg.record(RECORDS), partition=0, timestamp_ms=first + 10
            )
        finally:
            await producer.stop()
        last = window_start(stamps[-1], SIZE)
        starts = list(range(window_start(epoch, SIZE), last + SIZE, SIZE))
        want = len(starts) * 4  # three os rows and one mean row per window
        await poll_until(
            lambda: _released_through(rows, last),
            90,
            "the last window released",
            why=lambda: worker.log_text()[-3000:],
        )
        got = await scrape_until(port, lambda s: _window_end(s) * 1000 >= last + SIZE)
        # the gauges: the latest released window's values, as released
        end = got["privstream_aggregate_window_end_seconds", (("aggregate", "by_os"),)]
        assert end * 1000 >= last + SIZE
        label = window_label(int(end * 1000) - SIZE, SIZE)
        latest = await poll_until(lambda: _rows_of(rows, "by_os", label), 30, "its rows")
        gauges = {
            labels[1][1]: value
            for (name, labels), value in got.items()
            if name == "privstream_aggregate_value" and labels[0] == ("aggregate", "by_os")
        }
        assert gauges == {json.dumps(r["group"], separators=(",", ":")): r["value"] for r in latest}
    inputs = [m for m in await read_all(kafka_bootstrap, kafka["input_topic"], 2)]
    kept = [m for m in inputs if m.offset != late.offset]
    expected = agg.expected(config, kept, starts, SIZE_S)
    copies = agg.released(rows.records)
    released = {k: v for k, v in copies.items() if _start(k[1]) <= last}
    assert len(expected) == want
    assert set(released) == set(expected)
    assert all(len(v) == 1 for v in released.values()), "a window released twice"
    assert {k: v[0] for k, v in released.items()} == expected


async def _epoch(bootstrap: str, kafka: dict[str, str]) -> int | None:
    return (await agg.view(bootstrap, kafka)).epoch_ms


async def _closed(bootstrap: str, kafka: dict[str, str], end: int) -> bool:
    view = await agg.view(bootstrap, kafka)
    return all(view.progress.get((name, 0), 0) >= end for name in ("by_os", "mean_latency"))


async def _released_through(rows: Collector, last: int, size: int = SIZE) -> bool:
    labels = {agg.released([m]).popitem()[0][1] for m in rows.records}
    return window_label(last, size) in labels


def _start(label: str) -> int:
    stamp = datetime.datetime.strptime(label.split("/")[0], "%Y-%m-%dT%H:%M:%S.%fZ")
    return int(stamp.replace(tzinfo=datetime.UTC).timestamp() * 1000)


def _window_end(samples: dict) -> float:
    return float(
        samples.get(("privstream_aggregate_window_end_seconds", (("aggregate", "by_os"),)), 0)
    )


KILLS = 5
KILL_WINDOWS = 8  # windows of records at least; a kill after each of the first ``KILLS``
#: windows of records at most: more are fed until one kill has landed inside a release
MAX_KILL_WINDOWS = 40
PER_WINDOW = 40
KILL_GRACE_S = 20  # longer than a kill and restart: no record is late


async def test_kill_nine_during_window_closes(kafka_bootstrap: str, tmp_path: Path) -> None:
    """kill -9 right after a release transaction became visible to read_uncommitted, five
    times: each window is released exactly once (read_committed), every copy ever written
    (aborted ones too) is byte-identical to the expected rows.

    At each kill the worker is frozen (SIGSTOP) and the broker asked whether its release
    transaction is still open (``open_while_paused``); a kill that finds it open aborts
    it. A fast release commits before the freeze, so windows go on (a kill only where it
    lands inside a release) until one has landed: the aborted copies are then there by
    construction, not by the timing of one run (CI, session 15: none of five landed).

    Each window's records are stamped in the wall clock's next window of 1 s, and the
    grace (20 s) is longer than a kill and restart, so no record is late whatever the
    kills do to the timing (a restart reads its open windows again before it closes
    any), and the expected rows are a function of the input alone.
    """
    kafka, out, config = await agg.setup(kafka_bootstrap, tmp_path, "aggkill", 1, KILL_GRACE_S)
    extra = {"session_timeout_ms": 6000}
    config = agg.with_kafka(config, extra)
    workers: list[WorkerProcess] = []

    async def start() -> WorkerProcess:
        worker = WorkerProcess(config, tmp_path / f"worker{len(workers)}.log")
        await worker.start()
        workers.append(worker)
        return worker

    worker = await start()
    async with (
        Tail(kafka_bootstrap, out) as rows,
        Tail(kafka_bootstrap, out, isolation_level="read_uncommitted") as unc,
        OpenTransactions(kafka_bootstrap, out, 1) as probe,
    ):
        try:
            epoch = await poll_until(
                lambda: _epoch(kafka_bootstrap, kafka), 60, "the epoch committed", every_s=0.2
            )
            k = kills = landed = 0
            while k < KILL_WINDOWS or kills < KILLS or not landed:
                assert k < MAX_KILL_WINDOWS, f"{landed} of {kills} kills landed in {k} windows"
                index = range(k * PER_WINDOW, (k + 1) * PER_WINDOW)
                mark = len(unc.records)
                last = await agg.produce_window(kafka_bootstrap, kafka["input_topic"], index)
                k += 1
                if kills < KILLS or not landed:  # windows close every second: in a release
                    grown = functools.partial(_grew, unc, mark)
                    await unc.wait_until(grown, 90, "a release")
                    held = await open_while_paused(worker, probe)
                    if held or kills < KILLS:
                        landed += bool(held)
                        await worker.kill()
                        worker = await start()
                        kills += 1
            await poll_until(
                lambda: _released_through(rows, last, 1000),
                120,
                "the last window released",
                why=lambda: worker.log_text()[-3000:],
            )
        finally:
            for w in workers:
                if w.alive:
                    await w.kill()
    starts = list(range(window_start(epoch, 1000), last + 1000, 1000))
    inputs = await read_all(kafka_bootstrap, kafka["input_topic"], agg.PARTITIONS)
    expected = agg.expected(config, inputs, starts, 1)
    committed = agg.released(rows.records)
    committed = {k: v for k, v in committed.items() if _start(k[1]) <= last}
    assert set(committed) == set(expected)
    assert all(len(v) == 1 for v in committed.values()), "a window released twice"
    assert {k: v[0] for k, v in committed.items()} == expected
    every_copy = agg.released(unc.records)
    for key, copies in every_copy.items():
        if key in expected:
            assert set(copies) == {expected[key]}, f"a replay released other bytes: {key}"
    # the kills landed inside release transactions: their aborted copies are there too
    assert sum(len(v) for v in every_copy.values()) > sum(len(v) for v in committed.values())


def _grew(tail: Tail, mark: int) -> bool:
    return len(tail.records) > mark


async def _rows_of(rows: Collector, aggregate: str, label: str) -> list[dict] | None:
    found = [json.loads(m.value) for m in rows.records]
    mine = [r for r in found if r["aggregate"] == aggregate and r["window"] == label]
    return mine or None


async def test_an_internal_topic_that_would_forget_releases_is_refused(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A `delete` internal topic would forget its release markers: exit 2, naming the fix."""
    kafka, _out, config = await agg.setup(kafka_bootstrap, tmp_path, "aggtopic", 2, 0)
    await create_topics(kafka_bootstrap, [agg.internal_topic(kafka)])  # cleanup.policy=delete
    worker = WorkerProcess(config, tmp_path / "worker.log")
    await worker.start()
    assert await worker.wait(60) == 2
    assert "cleanup.policy='delete'; it must have 1 partition and 'compact'" in worker.log_text()


def _seen_at(m: ConsumerRecord) -> int | None:
    """The record's ``seen_at`` (epoch ms), None where it is no number (left out)."""
    value = json.loads(m.value).get("seen_at")
    return value if type(value) is int else None


async def test_windows_from_a_time_field(kafka_bootstrap: str, tmp_path: Path) -> None:
    """``window.time: seen_at``: each record's window is its field's. Every Kafka
    timestamp is in 1970 (every record would be late by it); a record whose ``seen_at``
    is missing or garbage is left out; the rows are byte for byte the file-mode pieces'
    over the records by their field's window."""
    kafka, out, config = await agg.setup(
        kafka_bootstrap, tmp_path, "aggtime", SIZE_S, GRACE_S, time="seen_at"
    )
    worker = WorkerProcess(config, tmp_path / "worker.log")
    await worker.start()
    async with running(worker), Collector(kafka_bootstrap, out) as rows:
        epoch = await poll_until(
            lambda: _epoch(kafka_bootstrap, kafka),
            60,
            "the epoch committed",
            every_s=0.2,
            why=lambda: worker.log_text()[-3000:],
        )
        base = window_start(int(time.time() * 1000), SIZE) + 2 * SIZE
        seen = [base + i * (3 * SIZE) // RECORDS for i in range(RECORDS)]
        values = []
        for i, at in enumerate(seen):
            body = json.loads(agg.record(i))
            if i % 10 != 3:  # missing on every tenth, garbage on another
                body["seen_at"] = "garbage" if i % 10 == 7 else at
            values.append((f"u{i % 37}".encode(), json.dumps(body).encode(), []))
        await produce(kafka_bootstrap, kafka["input_topic"], values, [1_000] * RECORDS)
        last = window_start(seen[-1], SIZE)
        await poll_until(
            lambda: _released_through(rows, last),
            90,
            "the last window released",
            why=lambda: worker.log_text()[-3000:],
        )
    inputs = await read_all(kafka_bootstrap, kafka["input_topic"], 2)
    starts = list(range(window_start(epoch, SIZE), last + SIZE, SIZE))
    expected = agg.expected(config, inputs, starts, SIZE_S, _seen_at)
    copies = agg.released(rows.records)
    released = {k: v for k, v in copies.items() if _start(k[1]) <= last}
    assert set(released) == set(expected)
    assert all(len(v) == 1 for v in released.values()), "a window released twice"
    assert {k: v[0] for k, v in released.items()} == expected
    counted = sum(_seen_at(m) is not None for m in inputs)
    assert counted == RECORDS - 2 * RECORDS // 10, "the left-out records are not the ones meant"

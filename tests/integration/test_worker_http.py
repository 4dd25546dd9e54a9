"""The worker's /metrics, /healthz and /readyz, scraped over real HTTP."""

from __future__ import annotations

import asyncio
import json
import math
import resource
import time
from pathlib import Path

from privstream.mechanisms import LaplaceMechanism, RandomizedResponse

from tests.support.broker import create_topics
from tests.support.faults import free_port, poll_until, samples, scrape_until
from tests.support.http_get import http_get
from tests.support.worker_proc import (
    Collector,
    WorkerProcess,
    produce,
    unique_topics,
    write_config,
)

BODY = {
    "privacy": {"epsilon": 1.5},
    "fields": [
        {"name": "seq", "kind": "public"},
        {
            "name": "amount",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": [0, 100],
            "epsilon": 1.0,
        },
        {"name": "tier", "kind": "categorical", "domain": ["a", "b", "c"], "epsilon": 0.5},
    ],
    "metrics": {"dead_letter_reasons": True},  # off by default (docs/metrics.md)
}
GOOD, BAD = (
    500,
    [b"[]", b"{oops", b'{"seq": 1, "amount": 5}', b'{"seq": 1, "amount": 5, "tier": "z"}'],
)


IN_TOTAL = ("privstream_records_in_total", ())


async def test_metrics_health_and_readiness(kafka_bootstrap: str, tmp_path: Path) -> None:
    kafka = unique_topics("http")
    await create_topics(kafka_bootstrap, list(kafka.values())[:3], partitions=1)
    port = free_port()
    body = {**BODY, "http": {"host": "127.0.0.1", "port": port}}
    config = write_config(tmp_path / "c.yaml", kafka_bootstrap, kafka, body)
    good = [
        (None, json.dumps({"seq": i, "amount": i % 100, "tier": "b"}).encode(), [])
        for i in range(GOOD)
    ]
    await produce(kafka_bootstrap, kafka["input_topic"], good + [(None, b, []) for b in BAD])

    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with (
        Collector(kafka_bootstrap, kafka["output_topic"]) as out,
        Collector(kafka_bootstrap, kafka["dead_letter_topic"]) as dead,
    ):
        await worker.start()
        await out.wait_for(GOOD, within_s=120)
        await dead.wait_for(len(BAD), within_s=60)
        # records flowed, so the worker is consuming: it must say it is ready
        assert await http_get(port, "/readyz") == (200, "ready\n")
        assert await http_get(port, "/healthz") == (200, "ok\n")
        assert (await http_get(port, "/nope"))[0] == 404
        # counters move after the batch is committed, a moment after its output is visible
        got = await scrape_until(port, lambda m: m.get(IN_TOTAL) == GOOD + len(BAD))
    assert await worker.terminate() == 0, worker.log_text()

    assert got[("privstream_records_in_total", ())] == GOOD + len(BAD)
    assert got[("privstream_records_out_total", ())] == GOOD
    for reason in ("not_object", "invalid_json", "missing_field", "unknown_category"):
        assert got[("privstream_records_dead_lettered_total", (("reason", reason),))] == 1
    assert got[("privstream_batch_duration_seconds_count", ())] >= 1
    # every committed batch went through every step; a batch a rebalance voided was only
    # polled and sanitized
    batches = got[("privstream_batch_size_records_count", ())]
    stage = "privstream_batch_stage_duration_seconds_count"
    for step in ("poll", "sanitize", "queued", "produce", "commit"):
        steps = got[(stage, (("stage", step),))]
        assert steps == batches if step in ("queued", "produce", "commit") else steps >= batches
    assert got[("privstream_broker_connected", ())] == 1
    laplace = LaplaceMechanism(bounds=(0, 100), epsilon=1.0)
    rr = RandomizedResponse(domain=["a", "b", "c"], epsilon=0.5)
    for name, mech in (("amount", laplace), ("tier", rr)):
        labels = (("field", name), ("mechanism", mech.name))
        assert got[("privstream_field_epsilon", labels)] == mech.epsilon
        assert got[("privstream_field_expected_error", labels)] == mech.expected_error
        assert got[("privstream_field_gamma_lower_bound", labels)] == mech.gamma_lower_bound


# --- issue 30: an endpoint that idle, slow and flooding clients cannot starve ---------------

#: held connections of each kind: together twice the issue's 1,000
IDLE, SLOW = 1_000, 1_000
#: a probe's answer within this: the issue's bound (the manifests' probes time out at 3 s,
#: Kubernetes' default at 1 s). The answer itself takes milliseconds; the bound is a
#: correctness bound that a probe queued behind the held sockets (0 answered before this
#: change) misses, with room for this shared 2-core machine's scheduling noise
PROBE_WITHIN_S = 1.0


def raise_fd_limit(needed: int) -> None:
    """This test process holds ~2,000 sockets: raise its soft limit if it is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


async def started_worker(bootstrap: str, tmp_path: Path) -> tuple[WorkerProcess, int]:
    """A worker on fresh topics, ready (its clients started: /readyz 200)."""
    kafka = unique_topics("http-starve")
    await create_topics(bootstrap, list(kafka.values())[:3], partitions=1)
    port = free_port()
    body = {**BODY, "http": {"host": "127.0.0.1", "port": port}}
    worker = WorkerProcess(
        write_config(tmp_path / "c.yaml", bootstrap, kafka, body), tmp_path / "w.log"
    )
    await worker.start()

    async def ready() -> bool:
        assert worker.alive, worker.log_text()[-3000:]
        try:
            return (await http_get(port, "/readyz"))[0] == 200
        except OSError:  # not listening yet
            return False

    await poll_until(ready, 120, "the worker ready", why=lambda: worker.log_text()[-3000:])
    return worker, port


class Attacker:
    """Holds ``IDLE`` connections that send nothing and ``SLOW`` ones that send a request
    a byte a second (slowloris). One the server closes is opened again at once, as an
    attacker would: the server holds about as many at any moment."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.open: set[int] = set()
        self.reopened = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._all_open = asyncio.Event()

    async def __aenter__(self) -> Attacker:
        kinds = [False] * IDLE + [True] * SLOW
        self._tasks = [asyncio.create_task(self._hold(i, slow)) for i, slow in enumerate(kinds)]
        await asyncio.wait_for(self._all_open.wait(), 60)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _hold(self, i: int, slow: bool) -> None:
        while True:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            self.open.add(i)
            if len(self.open) == IDLE + SLOW:
                self._all_open.set()
            try:
                if slow:
                    await self._trickle(reader, writer)
                else:
                    await reader.read()  # until the server closes it
            except ConnectionError:
                pass
            finally:
                self.open.discard(i)
                writer.close()
            self.reopened += 1

    @staticmethod
    async def _trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for byte in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 10_000:
            writer.write(bytes([byte]))
            await writer.drain()
            try:  # a byte a second, or the server's close
                await asyncio.wait_for(reader.read(), 1.0)
                return
            except TimeoutError:
                continue


async def timed_get(port: int, path: str) -> tuple[int, float]:
    started = time.perf_counter()
    status, _ = await asyncio.wait_for(http_get(port, path), 10)
    return status, time.perf_counter() - started


async def test_probes_are_answered_while_2000_idle_and_slow_connections_are_held(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    raise_fd_limit(4 * (IDLE + SLOW))
    worker, port = await started_worker(kafka_bootstrap, tmp_path)
    try:
        answers: list[tuple[str, int, float, int]] = []
        async with Attacker(port) as attacker:
            for _ in range(10):  # probes spread over the held connections' lifetime
                for path in ("/healthz", "/readyz"):
                    status, took = await timed_get(port, path)
                    answers.append((path, status, took, len(attacker.open)))
        slow = [a for a in answers if a[1] != 200 or a[2] > PROBE_WITHIN_S]
        assert not slow, f"probes not answered 200 within {PROBE_WITHIN_S}s: {slow}"
        # the attacker held at least the 1,000 while each probe was answered (all
        # 2,000 but for the moment a batch the server timed out is being reopened)
        assert min(a[3] for a in answers) >= max(IDLE, SLOW), answers
        text = (await http_get(port, "/metrics"))[1]
        assert "privstream_http_connections_evicted_total 0.0" in text  # the cap was not hit
    finally:
        assert await worker.terminate() == 0, worker.log_text()[-3000:]
    assert "Traceback" not in worker.log_text()


#: concurrent scrapers in the flood, and how long they keep asking
FLOODERS, FLOOD_S = 300, 2.0
#: the endpoint's bound on renders and on answered scrapes: 10 a second, each
PER_S = 10


async def renders_total(port: int) -> tuple[float, float]:
    """(privstream_http_metrics_renders_total in a fresh scrape, when it was answered)."""
    status, text = await http_get(port, "/metrics")
    assert status == 200
    return samples(text)[("privstream_http_metrics_renders_total", ())], time.perf_counter()


async def test_a_metrics_flood_is_rendered_and_answered_at_most_ten_times_a_second(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """300 scrapers ask at once and again when answered, for 2 s: renders and answers
    stay at most 10 a second (each at least 0.1 s after the one before), the scrapes
    whose turn was over 5 s away are refused (503, after those 5 s)."""
    worker, port = await started_worker(kafka_bootstrap, tmp_path)
    try:
        started = time.perf_counter()
        first, _ = await renders_total(port)
        statuses: list[int] = []

        async def scrape_loop() -> None:
            while time.perf_counter() - started < FLOOD_S:
                statuses.append((await http_get(port, "/metrics"))[0])

        await asyncio.gather(*(scrape_loop() for _ in range(FLOODERS)))
        # every turn taken is past once all are answered: this one is at once
        last, ended = await renders_total(port)
        text = (await http_get(port, "/metrics"))[1]
    finally:
        assert await worker.terminate() == 0, worker.log_text()[-3000:]
    allowed = math.floor(PER_S * (ended - started)) + 1  # 0.1 s apart from the first on
    assert last - first <= allowed, (last - first, allowed)
    answered = statuses.count(200) + 2  # with the first and the last
    assert answered <= allowed, (answered, allowed)
    # not vacuous: the flood asked for far more than that, and was refused the rest
    assert len(statuses) >= 2 * allowed, (len(statuses), allowed)
    assert statuses.count(503) + statuses.count(200) == len(statuses)
    refused = samples(text)[("privstream_http_scrapes_refused_total", ())]
    assert refused == statuses.count(503) > 0

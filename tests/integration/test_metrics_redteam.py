"""Red team: raw values from the sanitized topic plus /metrics, one record per commit.

The attack of issue 12: a reader of both the sanitized topic (``y``) and
``/metrics`` sends nothing, but watches a real worker commit one record at a
time and scrapes after each commit. Before the fix the error histogram's
``_sum`` grew by exactly ``|y - x|`` per record and 30 of 30 raw values came
back within one unit. The metrics now hold canary errors only, so the attacker
must do no better than chance.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from privstream.config import load_config
from privstream.kinds import build_plan
from privstream.mechanisms import LaplaceMechanism

from tests.support.broker import create_topics
from tests.support.faults import Samples, free_port, metric, poll_until, scrape_until
from tests.support.worker_proc import Collector, WorkerProcess, unique_topics, write_config

#: single-record commits
ROUNDS = 30
CANARIES = 32
BOUNDS = (0.0, 1000.0)
#: the attack succeeds on a record when a guess lands within this of the raw value
WITHIN = 1.0
BODY: dict[str, Any] = {
    "privacy": {"epsilon": 1.0},
    "fields": [
        {"name": "seq", "kind": "public"},
        {
            "name": "amount",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": list(BOUNDS),
            "epsilon": 1.0,
        },
    ],
    "metrics": {"canaries": CANARIES, "canary_interval_seconds": 0},  # every batch
}
FIELD = (("field", "amount"), ("mechanism", "laplace"))
IN_TOTAL = ("privstream_records_in_total", ())
BATCHES = ("privstream_batch_size_records_count", ())


def guesses(y: float, before: Samples, after: Samples) -> list[float]:
    """What the attacker makes of one scrape-to-scrape step: ``x = y -+ error``, with the
    record's error read off the histogram's sum and off the running mean."""
    total = [s[("privstream_field_canary_error_sum", FIELD)] for s in (before, after)]
    count = [s[("privstream_field_canary_error_count", FIELD)] for s in (before, after)]
    mean = [s.get(("privstream_field_canary_error_mean", FIELD), 0.0) for s in (before, after)]
    by_sum = total[1] - total[0]
    by_mean = mean[1] * count[1] - mean[0] * count[0]
    return [y - by_sum, y + by_sum, y - by_mean, y + by_mean]


def hit_probability(mech: LaplaceMechanism, guesses_per_record: int) -> float:
    """P(some guess lands within WITHIN of x) when the guesses are independent of the noise.

    ``y = g (round(x / g) + K)``, K discrete Laplace: for a guess ``c`` independent of K,
    ``|c - x| <= 1`` needs ``g K`` in an interval of length ``2 + g`` (rounding moves x by
    at most ``g / 2``), which holds at most ``floor(2 / g) + 2`` lattice points, each of
    probability at most ``P(K = 0)``. Union bound over the guesses.
    """
    assert mech.noise is not None
    points = math.floor(2 * WITHIN / mech.granularity) + 2
    return guesses_per_record * points * mech.noise.p_zero


def binomial_tail(n: int, p: float, k: int) -> float:
    """P(Bin(n, p) >= k)."""
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))


async def test_metrics_and_output_together_recover_no_raw_value(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """30 single-record commits, /metrics scraped after each: recovery no better than chance.

    Chance: each record is hit with probability at most p (``hit_probability``, about
    0.006 for four guesses at epsilon 1 over [0, 1000]); the test allows the smallest k
    with P(Bin(30, p) >= k + 1) <= 1e-4: k = 3, and a worker whose metrics tell nothing
    fails it with probability P(Bin(30, 0.006) >= 4) = 3.1e-5. The old metric gave 30
    hits of 30.
    """
    kafka = unique_topics("redteam")
    await create_topics(kafka_bootstrap, list(kafka.values())[:3], partitions=1)
    port = free_port()
    config = write_config(
        tmp_path / "c.yaml",
        kafka_bootstrap,
        kafka,
        {**BODY, "http": {"host": "127.0.0.1", "port": port}},
    )
    mech = build_plan(load_config(config)).handlers[1].mechanism
    assert isinstance(mech, LaplaceMechanism)
    p = hit_probability(mech, 4)
    allowed = next(k for k in range(ROUNDS) if binomial_tail(ROUNDS, p, k + 1) <= 1e-4)
    assert allowed <= 4, f"chance level {p:.3g} too high for the test to mean anything"

    rng = random.Random(12)
    raw = [rng.uniform(*BOUNDS) for _ in range(ROUNDS)]
    worker = WorkerProcess(config, tmp_path / "worker.log", log_level="INFO")
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    hits, scrapes = 0, []
    async with Collector(kafka_bootstrap, kafka["output_topic"], fetch_max_wait_ms=25) as out:
        await producer.start()
        await worker.start()
        try:
            up = await poll_until(
                lambda: metric(port, IN_TOTAL[0]),
                60,
                "the worker's /metrics up",
                why=worker.log_text,
            )
            assert up == 0
            before = await scrape_until(port, lambda m: IN_TOTAL in m)
            for i, x in enumerate(raw):
                record = json.dumps({"seq": i, "amount": x}).encode()
                await producer.send_and_wait(kafka["input_topic"], record)
                # the counters move right after the commit: this scrape follows it
                after = await scrape_until(port, lambda m, i=i: m.get(IN_TOTAL) == i + 1)
                assert after.get(IN_TOTAL) == i + 1, worker.log_text()[-3000:]
                [released] = (await out.wait_for(i + 1, within_s=30))[i:]
                y = json.loads(released.value)["amount"]
                assert json.loads(released.value)["seq"] == i
                hits += any(abs(g - x) <= WITHIN for g in guesses(y, before, after))
                scrapes.append(after)
                before = after
        finally:
            await producer.stop()
            if worker.alive:
                assert await worker.terminate() == 0, worker.log_text()[-3000:]

    # the setting of the attack: one batch per record, a scrape after each commit
    assert [s[BATCHES] for s in scrapes] == list(range(1, ROUNDS + 1))
    counts = [s[("privstream_field_canary_error_count", FIELD)] for s in scrapes]
    assert counts == [CANARIES * (i + 1) for i in range(ROUNDS)]
    assert not [k for k in scrapes[-1] if "clamped" in k[0]]  # off by default
    assert hits <= allowed, (
        f"{hits} of {ROUNDS} raw values recovered within {WITHIN}; chance allows {allowed} "
        f"(per record at most {p:.3g})"
    )

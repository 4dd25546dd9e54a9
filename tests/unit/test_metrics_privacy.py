"""/metrics is no function of raw values or of released noise, except as documented.

* The whole exposition, driven as the worker drives it, is byte-identical for
  batches of different raw values (same canary seed).
* Dead-letter reason labels are off by default.
* Clamped counts are off by default; when on, each fixed window is released
  with discrete Laplace noise of the stated epsilon, each record in one window.
"""

from __future__ import annotations

import json
import math
import random
import threading
from typing import Any

import numpy as np
import pytest
from privstream.clamped_counts import NoisyClampedCounts
from privstream.cli.explain import explain, explain_data
from privstream.config import parse_config
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.metrics import Metrics
from privstream.pipeline import process_batch
from privstream.pipeline.results import Observation
from privstream.testing import SeededSource
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.configs import config_dict

FIELDS: list[dict[str, Any]] = [
    {"name": "seq", "kind": "public"},
    {"name": "amount", "kind": "real", "bounds": [0, 1000], "epsilon": 1.0},
    {"name": "clicks", "kind": "integer", "bounds": [0, 20], "epsilon": 1.0},
    {"name": "tier", "kind": "categorical", "domain": ["a", "b", "c"], "epsilon": 1.0},
    {"name": "opted_in", "kind": "boolean", "epsilon": 0.5},
]


def plan_of(metrics: dict[str, Any] | None = None, group_size: int = 1) -> Any:
    data = config_dict(FIELDS, epsilon=4.0)
    data["privacy"]["group_size"] = group_size
    if metrics is not None:
        data["metrics"] = metrics
    config = parse_config(data)
    return config, build_plan(config)


def records(rng: random.Random, n: int, start: int) -> list[bytes]:
    """Valid records (some values outside the bounds: clamped)."""
    return [
        json.dumps(
            {
                "seq": start + i,
                "amount": rng.uniform(-100, 1100),
                "clicks": rng.randint(0, 30),
                "tier": rng.choice("abc"),
                "opted_in": rng.random() < 0.5,
            }
        ).encode()
        for i in range(n)
    ]


def worker_scrapes(seed: int, sizes: list[int]) -> list[bytes]:
    """/metrics after each committed batch, the instruments driven as the worker loop does
    (durations left out: wall time is a residual the README names)."""
    _, plan = plan_of()
    metrics = Metrics(CollectorRegistry())
    metrics.describe_plan(plan, canary_interval_s=0, canary_source=SeededSource(99))
    rng = random.Random(seed)
    scrapes = []
    start = 0
    for size in sizes:
        # release noise differs too: it is part of what the metrics must not reveal
        result = process_batch(plan, records(rng, size, start), SeededSource(seed * 1000 + start))
        start += size
        metrics.records_in.inc(size)
        metrics.records_out.inc(len(result.outputs))
        metrics.count_dead_letters(result.dead_letters)
        metrics.batch_records.observe(size)
        metrics.observe_fields(result.observations)
        scrapes.append(without_created(generate_latest(metrics.registry)))
    return scrapes


def without_created(text: bytes) -> bytes:
    """The exposition without the ``*_created`` series (wall-clock creation times)."""
    lines = text.splitlines(keepends=True)
    return b"".join(line for line in lines if b"_created" not in line)


def test_every_scrape_is_byte_identical_whatever_the_raw_values_and_release_noise() -> None:
    """Single-record batches (the attack of the issue) and bigger ones: /metrics is the same
    bytes for other records and other release noise, so it tells nothing about either."""
    sizes = [1] * 30 + [50, 7]
    first, second = worker_scrapes(1, sizes), worker_scrapes(2, sizes)
    assert first == second
    assert b"privstream_field_canary_error_sum" in first[0]
    # and the canary metrics do move from batch to batch: they are measured, not constant
    assert len(set(first)) == len(first)


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_dead_letter_reasons_are_off_by_default_and_a_switch_turns_them_on() -> None:
    config, plan = plan_of()
    assert config.metrics.dead_letter_reasons is False
    bad = [b"{oops", json.dumps({"seq": 1, "amount": 1, "clicks": 1, "tier": "z"}).encode()]
    dead = process_batch(plan, bad, SeededSource(1)).dead_letters
    assert {d.reason for d in dead} == {"invalid_json", "unknown_category"}
    quiet = Metrics(CollectorRegistry())
    quiet.count_dead_letters(dead)
    got = samples(quiet.registry)
    assert got[("privstream_records_dead_lettered_total", ())] == 2
    assert not [key for key in got if key[0].startswith("privstream_records_dead") and key[1]]
    config, _ = plan_of({"dead_letter_reasons": True})
    loud = Metrics(CollectorRegistry(), dead_letter_reasons=config.metrics.dead_letter_reasons)
    loud.count_dead_letters(dead)
    got = samples(loud.registry)
    assert got[("privstream_records_dead_lettered_total", (("reason", "invalid_json"),))] == 1
    assert got[("privstream_records_dead_lettered_total", (("reason", "unknown_category"),))] == 1


def test_clamped_counts_are_off_by_default_and_need_an_epsilon() -> None:
    config, plan = plan_of()
    assert config.metrics.clamped_counts is None
    metrics = Metrics(CollectorRegistry())
    metrics.describe_plan(plan)
    metrics.observe_fields({"amount": Observation(5)})
    assert b"clamped" not in generate_latest(metrics.registry)
    assert plan_of({"clamped_counts": False})[0].metrics.clamped_counts is None
    with pytest.raises(ConfigError, match="epsilon"):
        plan_of({"clamped_counts": True})
    with pytest.raises(ConfigError, match="window_seconds"):
        plan_of({"clamped_counts": {"epsilon": 0.1, "window_seconds": 0.5}})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def published(collector: NoisyClampedCounts) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(collector)
    return {
        key[1][0][1]: value
        for key, value in samples(registry).items()
        if key[0] == "privstream_field_clamped_noisy"
    }


def test_each_record_counts_in_exactly_one_fixed_window() -> None:
    """At epsilon 60 over 2 fields the noise is 0 except with probability 2 e^-30 per
    count (discrete Laplace, t = 2/60: P(Z != 0) = 2a/(1+a), a = e^-30): exact counts."""
    _, plan = plan_of()
    clock = Clock()
    counts = NoisyClampedCounts(
        plan, epsilon=60.0, window_s=10.0, source=SeededSource(4), clock=clock
    )
    assert published(counts) == {}  # nothing before the first window ends
    counts.observe({"amount": Observation(3), "clicks": Observation(1), "tier": Observation(0)})
    clock.now += 9.9
    counts.observe({"amount": Observation(2), "clicks": Observation(0)})
    assert published(counts) == {}
    clock.now += 0.1  # the window [1000, 1010) ends
    assert published(counts) == {"amount": 5, "clicks": 1}
    counts.observe({"amount": Observation(4), "clicks": Observation(4)})
    assert published(counts) == {"amount": 5, "clicks": 1}  # the new window is not over
    clock.now += 25.0  # 1035: [1010, 1020) held the 4s; [1020, 1030) passed without a batch
    assert published(counts) == {"amount": 4, "clicks": 4}
    counts.observe({"amount": Observation(7), "clicks": Observation(0)})
    clock.now = 1040.0  # the grid stays fixed: the window [1030, 1040) ends here
    assert published(counts) == {"amount": 7, "clicks": 0}


class GatedSource(SeededSource):
    """Counts the words drawn; the first draw waits (0.5 s at most) for a second one."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.drawn = 0
        self.first_inside, self.second_came = threading.Event(), threading.Event()

    def words(self, n: int, k: int) -> Any:
        if not self.first_inside.is_set():
            self.first_inside.set()
            self.second_came.wait(0.5)
        else:
            self.second_came.set()
        self.drawn += n * k
        return super().words(n, k)


def test_a_scrape_and_a_batch_at_a_window_end_draw_its_noise_once() -> None:
    """/metrics renders on the HTTP thread while the worker observes. The worker's roll
    finds the window ended and draws its noise, waiting there (0.5 s at most) for the
    scrape's roll to draw too: without the lock both would draw noise for the same
    counts (a second release). With it, the scrape's roll waits for the worker's and
    finds the new window open. The words drawn are those of one roll of a twin."""
    _, plan = plan_of()
    clock, twin_clock = Clock(), Clock()
    source, twin_source = GatedSource(6), GatedSource(6)
    counts = NoisyClampedCounts(plan, epsilon=1.0, window_s=10.0, source=source, clock=clock)
    twin = NoisyClampedCounts(
        plan, epsilon=1.0, window_s=10.0, source=twin_source, clock=twin_clock
    )
    clock.now = twin_clock.now = 1010.0  # the window [1000, 1010) has ended
    worker = threading.Thread(target=counts.observe, args=({"amount": Observation(5)},))
    worker.start()
    assert source.first_inside.wait(10)
    scraped = published(counts)  # this thread: the scrape
    worker.join(10)
    twin.observe({"amount": Observation(5)})  # one roll, alone
    assert source.drawn == twin_source.drawn > 0
    assert scraped == published(twin)  # the same seed and one draw: the same release


def test_window_noise_is_discrete_laplace_at_the_stated_epsilon() -> None:
    """20,000 windows, epsilon 1 over F = 2 fields: Z discrete Laplace with t = F/eps = 2.

    From the definition P(Z = z) = (1-a)/(1+a) a^|z|, a = e^(-eps/F): P(Z = 0) = (1-a)/(1+a),
    E|Z| = 2a/(1-a^2), E Z = 0, Var Z = 2a/(1-a)^2. Each check allows 5 standard errors
    (binomial for P(Z = 0), sqrt(Var/n) for the means): false failure < 1e-5 in all.
    A count released with too little noise (a larger epsilon) has more zeros and a
    smaller E|Z|: at t = 1.6 (eps 25% larger), P(Z=0) moves by 19 standard errors.
    """
    _, plan = plan_of()
    clock = Clock()
    counts = NoisyClampedCounts(
        plan, epsilon=1.0, window_s=1.0, source=SeededSource(5), clock=clock
    )
    n, true = 10_000, {"amount": 3, "clicks": 0}
    noise = []
    for _ in range(n):
        counts.observe({name: Observation(c) for name, c in true.items()})
        clock.now += 1.0
        noise.extend(value - true[name] for name, value in published(counts).items())
    z = np.array(noise)
    a = math.exp(-1.0 / 2.0)
    p0, mean_abs, var = (1 - a) / (1 + a), 2 * a / (1 - a * a), 2 * a / (1 - a) ** 2
    m = len(z)
    assert m == 2 * n
    assert abs(np.mean(z == 0) - p0) < 5 * math.sqrt(p0 * (1 - p0) / m)
    assert abs(np.mean(np.abs(z)) - mean_abs) < 5 * math.sqrt(var / m)
    assert abs(np.mean(z)) < 5 * math.sqrt(var / m)
    assert np.all(z == np.round(z))


def test_explain_states_the_metrics_epsilon_and_the_total() -> None:
    config, plan = plan_of()
    data = explain_data(config, plan)
    assert data["metrics"]["epsilon"] == 0.0 and data["metrics"]["clamped_counts"] is None
    assert "metrics: epsilon=0" in explain(config, plan, "table")
    config, plan = plan_of({"clamped_counts": {"epsilon": 0.25, "window_seconds": 30}}, 3)
    data = explain_data(config, plan)["metrics"]
    assert data["clamped_counts"] == {
        "epsilon": 0.25,
        "window_seconds": 30.0,
        "fields": ["amount", "clicks"],
        "group_epsilon": 0.75,
    }
    assert data["record_epsilon_with_metrics"] == pytest.approx(plan.epsilon + 0.25)
    table = explain(config, plan, "table")
    assert "epsilon=0.25 per record" in table and "30 s window" in table
    assert f"epsilon={plan.epsilon + 0.25:.6g} per record in all" in table
    assert "clamped counts per individual: epsilon=0.75" in table  # group of 3

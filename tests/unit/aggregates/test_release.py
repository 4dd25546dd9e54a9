"""Releases: every declared cell once, the DP inequality on neighbouring inputs, interval
coverage, and keyed noise that a replay reproduces byte for byte."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import pytest
from privstream.aggregates import KeyedCells, Partial, release
from privstream.aggregates.release import encode_rows, noisy_totals

from tests.support.aggregates import Seeded, one_plan, pmf

SECRET = bytes(range(32))
BY_OS = {
    "name": "by_os",
    "query": "count",
    "group_by": [{"field": "os"}, {"field": "version", "keys": ["1.0", "2.0"]}],
    "epsilon": 0.5,
}
MEAN = {"name": "m", "query": "mean", "field": "latency", "bounds": [0, 100], "epsilon": 1.0}
BOUNDS = {"records_per_group": 2, "groups_per_subject": 3}


def data(seed: int, n: int = 200) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "user": rng.randrange(15),
            "os": rng.choice(["ios", "android", "web"]),
            "version": rng.choice(["1.0", "2.0", "3.0"]),
            "latency": rng.uniform(0, 100),
        }
        for _ in range(n)
    ]


def test_every_declared_cell_is_released_once_even_when_empty() -> None:
    plan = one_plan(BY_OS)
    rows = release(plan, Partial("by_os", "w"), KeyedCells(SECRET, "raw"))
    groups = [row["group"] for row in rows]
    assert len(groups) == 6
    assert {"os": "web", "version": "2.0"} in groups
    row = rows[0]
    assert set(row) == {
        "aggregate",
        "window",
        "group",
        "value",
        "std_error",
        "ci95",
        "epsilon",
        "delta",
        "bounds",
    }
    assert isinstance(row["value"], int)
    assert row["ci95"][0] <= row["value"] <= row["ci95"][1]
    assert row["epsilon"] == 0.5


def test_a_replay_releases_identical_bytes_and_anything_else_fresh_noise() -> None:
    plan = one_plan(MEAN)
    acc = plan.accumulator("2026-11-28T06")
    acc.add_all(data(1))
    partial = acc.partial()
    first = encode_rows(release(plan, partial, KeyedCells(SECRET, "raw")))
    again = encode_rows(release(plan, partial, KeyedCells(SECRET, "raw")))
    assert first == again
    other_window = Partial(plan.name, "2026-11-28T07", partial.counts, partial.sums)
    other_key = KeyedCells(bytes(32), "raw")
    other_domain = KeyedCells(SECRET, "raw", "eu")
    base = noisy_totals(plan, partial, KeyedCells(SECRET, "raw"))
    shifted = noisy_totals(plan, other_window, KeyedCells(SECRET, "raw"))
    assert base != shifted
    assert base != noisy_totals(plan, partial, other_key)
    assert base != noisy_totals(plan, partial, other_domain)


def test_the_sum_and_the_count_of_a_mean_draw_independent_words() -> None:
    plan = one_plan(MEAN)
    assert plan.release_id("sum") != plan.release_id("count")
    assert one_plan({**MEAN, "epsilon": 1.5}).release_id("sum") != plan.release_id("sum")


def _loss(t: float, first: dict[Any, int], second: dict[Any, int], cells: Sequence[Any]) -> float:
    """The exact worst log-ratio of the two releases' pmfs: each cell's worst, summed.

    ``|z| - |z - s|`` is constant outside ``[min(0, s), max(0, s)]``, so outputs within
    ``|s| + 2`` of 0 reach every value the ratio takes.
    """
    total = 0.0
    for cell in cells:
        shift = first.get(cell, 0) - second.get(cell, 0)
        reach = abs(shift) + 2
        total += max(math.log(pmf(t, z) / pmf(t, z - shift)) for z in range(-reach, reach + 1))
    return total


@pytest.mark.parametrize("seed", range(3))
def test_neighbouring_inputs_meet_the_dp_inequality_exactly(seed: int) -> None:
    """Remove each subject in turn: the release's exact pmf ratio stays within e^eps."""
    plan = one_plan({**BY_OS, "contribution": BOUNDS}, subject="user")
    (total,) = plan.query.totals
    records = data(seed)
    full = plan.accumulator("w")
    full.add_all(records)
    for user in range(15):
        without = plan.accumulator("w")
        without.add_all(r for r in records if r["user"] != user)
        for first, second in ((full, without), (without, full)):
            loss = _loss(total.noise.t, first.partial().counts, second.partial().counts, plan.cells)
            assert loss <= plan.query.epsilon


def test_count_intervals_cover_the_bounded_count() -> None:
    """2,000 releases (seed fixed) of 6 cells: each interval covers w.p. >= 0.95,
    independently, so the covered share of 12,000 is below 0.935 with probability
    <= exp(-12000 KL(0.935 || 0.95)) < 1e-11 (Chernoff): the test asserts >= 0.935."""
    plan = one_plan(BY_OS)
    acc = plan.accumulator("w")
    acc.add_all(data(3))
    partial = acc.partial()
    noise, covered, n = Seeded(2026), 0, 0
    for _ in range(2000):
        for cell, row in zip(plan.cells, release(plan, partial, noise), strict=True):
            low, high = row["ci95"]
            covered += low <= partial.counts.get(cell, 0) <= high
            n += 1
    assert covered / n >= 0.935


def test_mean_intervals_cover_the_bounded_mean() -> None:
    """2,000 releases (seed fixed): each covers w.p. >= 0.95 (two 97.5% intervals, union
    bound); asserted >= 0.92, false failure <= exp(-2000 KL(0.92 || 0.95)) < 1e-7
    (Chernoff)."""
    plan = one_plan(MEAN)
    acc = plan.accumulator("w")
    acc.add_all(data(4, n=60))
    partial = acc.partial()
    step = plan.reader.step
    truth = plan.query.center + step * partial.sums[()] / partial.counts[()]
    noise = Seeded(34)
    hits = 0
    for _ in range(2000):
        (row,) = release(plan, partial, noise)
        hits += row["ci95"][0] <= truth <= row["ci95"][1]
        assert 0.0 <= row["value"] <= 100.0
    assert hits / 2000 >= 0.92


def test_a_mean_divides_by_the_noisy_count_never_the_true_one() -> None:
    query = one_plan(MEAN).query
    step = query.total("sum").step
    value, _, _ = query.answer({"sum": round(10 / step) * 4, "count": 5})
    assert value == pytest.approx(50 + 10 * 4 / 5)
    empty, _, interval = query.answer({"sum": 0, "count": -3})
    assert empty == 50.0 and interval == (0.0, 100.0)


@pytest.mark.parametrize("seed", range(2))
def test_a_means_two_totals_meet_the_dp_inequality_together(seed: int) -> None:
    """Remove each subject: the sum's and the count's exact losses add up to at most eps."""
    plan = one_plan({**MEAN, "contribution": BOUNDS}, subject="user")
    total, count = plan.query.total("sum"), plan.query.total("count")
    records = data(seed, n=120)
    full = plan.accumulator("w")
    full.add_all(records)
    for user in range(15):
        without = plan.accumulator("w")
        without.add_all(r for r in records if r["user"] != user)
        a, b = full.partial(), without.partial()
        loss = _loss(total.noise.t, a.sums, b.sums, plan.cells)
        loss += _loss(count.noise.t, a.counts, b.counts, plan.cells)
        assert loss <= plan.query.epsilon

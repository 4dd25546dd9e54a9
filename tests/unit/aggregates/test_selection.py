"""Partition selection: the threshold's delta, decisions on the noisy count, replay."""

from __future__ import annotations

import math

import pytest
from privstream.aggregates import KeyedCells, Partial, release
from privstream.aggregates.release import encode_rows
from privstream.aggregates.selection import new_group_delta, tail_above, threshold
from privstream.mechanisms.discrete_laplace import DiscreteLaplace

from tests.support.aggregates import Seeded, one_plan, pmf

SELECTED = {
    "name": "v",
    "query": "count",
    "group_by": [{"field": "version"}],
    "select_groups": True,
    "epsilon": 1.0,
    "delta": 1e-6,
}


@pytest.mark.parametrize(("t", "groups", "per_group"), [(1.0, 1, 1), (6.0, 3, 2), (40.0, 10, 5)])
def test_the_threshold_is_the_least_whose_new_groups_stay_within_delta(
    t: float, groups: int, per_group: int
) -> None:
    noise, epsilon, delta = DiscreteLaplace(t), 1.0, 1e-6
    tau = threshold(noise, epsilon, delta, groups, per_group)

    def chance(m: int) -> float:  # e^eps G P(Z >= m), P from the pmf, not the closed form
        return math.exp(epsilon) * groups * math.fsum(pmf(t, z) for z in range(m, m + int(80 * t)))

    assert chance(tau - per_group) <= delta
    assert chance(tau - per_group - 1) > delta * (1 - 1e-6) or tau - per_group == 1
    assert new_group_delta(noise, epsilon, groups, tau - per_group) <= delta
    assert tail_above(noise, 3) == pytest.approx(math.fsum(pmf(t, z) for z in range(3, 2000)))


def test_a_plan_with_selection_calibrates_to_the_groups_a_subject_reaches() -> None:
    bounds = {"records_per_group": 2, "groups_per_subject": 3}
    plan = one_plan({**SELECTED, "contribution": bounds}, subject="user")
    (count,) = plan.query.totals
    assert count.sensitivity.used == 6.0 and count.realised_delta == 0.0
    assert plan.threshold == threshold(count.noise, 1.0, 1e-6, 3, 2)
    assert plan.delta == 1e-6 and plan.epsilon == 1.0


def test_only_groups_whose_noisy_count_passes_are_released() -> None:
    plan = one_plan(SELECTED)
    assert plan.threshold is not None
    partial = Partial("v", "w", {("1.0",): 5000, ("rare",): 1})
    rows = release(plan, partial, KeyedCells(bytes(32), "raw"))
    assert [row["group"] for row in rows] == [{"version": "1.0"}]
    assert rows[0]["delta"] == 1e-6
    assert encode_rows(rows) == encode_rows(release(plan, partial, KeyedCells(bytes(32), "raw")))


def test_a_group_of_one_record_shows_as_often_as_its_noisy_count_passes() -> None:
    """delta 0.2 (threshold low enough to see): over 6,000 seeded releases, the share
    releasing the one-record group is P(1 + Z >= tau) within 5 sd (false failure < 1e-6)."""
    plan = one_plan({**SELECTED, "delta": 0.2}, delta=0.9)
    assert plan.threshold is not None
    (count,) = plan.query.totals
    p = tail_above(count.noise, plan.threshold - 1)
    assert math.e * p <= 0.2
    partial = Partial("v", "w", {("rare",): 1})
    noise = Seeded(12)
    shown = sum(len(release(plan, partial, noise)) for _ in range(6000))
    assert abs(shown / 6000 - p) <= 5 * math.sqrt(p * (1 - p) / 6000)

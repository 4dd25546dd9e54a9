"""Independent, naive and correlated sensitivity (DESIGN.md "Correlated sensitivity").

Expected values are the seed's formulas: ``CS = 1 + degree (m - 1)`` per
record for a count, the naive ``m``, the independent 1, times the unit's
records ``L``; the cap's swap adds one record's ``Delta``; never above naive.
"""

from __future__ import annotations

import pytest
from privstream.aggregates.sensitivity import Sensitivity

from tests.support.aggregates import one_plan


def test_independent_records_use_the_global_sensitivity() -> None:
    s = Sensitivity(records=1, per_record=1)
    assert (s.independent, s.naive, s.correlated, s.used) == (1.0, 1.0, 1.0, 1.0)
    assert s.integer_shift


@pytest.mark.parametrize(
    ("degree", "m", "expected"),
    [(0.0, 10, 1.0), (0.5, 10, 5.5), (0.2, 6, 2.0), (1.0, 10, 10.0), (0.1, 1, 1.0)],
)
def test_correlated_count_is_one_plus_degree_times_m_minus_one(
    degree: float, m: int, expected: float
) -> None:
    s = Sensitivity(records=1, per_record=1, degree=degree, max_group=m)
    assert s.correlated == pytest.approx(expected)
    assert s.naive == m
    assert s.independent == 1.0
    assert not s.integer_shift


def test_the_seeds_family_of_ten_naive_is_ten_times_the_noise() -> None:
    """Alice and 9 relatives at one address: naive 10, CS 1 + 9 degree, independent 1."""
    s = Sensitivity(records=1, per_record=1, degree=0.3, max_group=10)
    assert s.naive == 10.0
    assert s.correlated == pytest.approx(1.0 + 0.3 * 9)
    assert s.independent <= s.correlated <= s.naive


def test_the_caps_swap_adds_one_record_and_never_passes_naive() -> None:
    assert Sensitivity(1, 1, 0.5, 10, swap=True).correlated == pytest.approx(6.5)
    # degree 1: 1 + 9 + 1 = 11 > naive 10, so naive
    assert Sensitivity(1, 1, 1.0, 10, swap=True).correlated == 10.0


def test_a_units_records_and_a_sums_steps_multiply() -> None:
    s = Sensitivity(records=6, per_record=7)
    assert s.used == 42.0
    assert Sensitivity(2, 3, 0.5, 5).correlated == pytest.approx(2 * 3 * 3.0)


def test_plans_derive_the_unit_from_subject_group_size_or_the_record() -> None:
    count = {"name": "c", "query": "count", "epsilon": 1.0}
    bounded = {**count, "contribution": {"records_per_group": 3, "groups_per_subject": 2}}
    # one cell: a subject reaches at most min(groups_per_subject, cells) = 1 cell
    assert one_plan(bounded, subject="user").query.totals[0].sensitivity.used == 3.0
    histogram = {**bounded, "query": "histogram", "field": "os"}  # 3 bins
    assert one_plan(histogram, subject="user").query.totals[0].sensitivity.used == 6.0
    assert one_plan(count, group_size=4).query.totals[0].sensitivity.used == 4.0
    assert one_plan(count).query.totals[0].sensitivity.used == 1.0


def test_plans_use_the_correlated_sensitivity_with_the_swap_where_it_moves_the_total() -> None:
    corr = {"by": "home", "degree": 0.5, "max_group": 10}
    single = one_plan({"name": "c", "query": "count", "epsilon": 1.0, "correlation": corr})
    assert single.query.totals[0].sensitivity.used == pytest.approx(5.5)
    hist = one_plan(
        {"name": "h", "query": "histogram", "field": "os", "epsilon": 1.0, "correlation": corr}
    )
    assert hist.query.totals[0].sensitivity.used == pytest.approx(6.5)

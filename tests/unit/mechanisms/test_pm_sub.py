"""PM-SUB (issue 35, item 2): PM's grid at the window share of eps/3.

The exact-law checks reuse the piecewise test's enumeration (every window
position, every residue of the sampler's words, in exact rationals); the
statistical tests use fixed seeds and state their false-failure probability.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from privstream.mechanisms.piecewise import PiecewiseMechanism, calibrate
from privstream.mechanisms.pm_sub import PiecewiseSubMechanism
from privstream.testing import SeededSource
from scipy import stats

from tests.unit.mechanisms.test_piecewise import (
    assert_small_grid_keeps_the_ratio,
    cell_law,
    exact_mean,
)
from tests.unit.mechanisms.unit_interval_checks import (
    coverage,
    draws,
    draws_at_the_law,
    exp_upper,
    interval_violation,
)


def pm_sub_worst_variance(epsilon: float) -> float:
    """Zhao et al. (2020), continuous PM-SUB at ``t = 1``: uniform on ``[L, R]`` with
    probability ``e^eps / (e^{eps/3} + e^eps)``, else uniform on the rest of ``[-A, A]``."""
    e, e3 = math.exp(epsilon), math.exp(epsilon / 3.0)
    a = (e + e3) * (e3 + 1.0) / (e3 * (e - 1.0))  # the output bound
    half_window = (e + e3) / (e3 * (e - 1.0))  # (R - L) / 2
    p_in = e / (e3 + e)
    t = 1.0
    left, right = t * e3 * half_window - half_window, t * e3 * half_window + half_window
    second_in = (right**3 - left**3) / (3.0 * (right - left))
    outside = (right**3 - left**3) * -1.0 + 2.0 * a**3
    second_out = outside / (3.0 * (2.0 * a - (right - left)))
    return p_in * second_in + (1.0 - p_in) * second_out - t * t


@pytest.mark.parametrize("cells", [4, 7, 12])
@pytest.mark.parametrize("epsilon", [0.05, 0.7, 2.0, 9.0])
def test_enumerated_cell_law_of_small_grids_keeps_the_ratio(cells: int, epsilon: float) -> None:
    assert_small_grid_keeps_the_ratio(calibrate(epsilon, cells, split=3), epsilon)


@pytest.mark.parametrize("epsilon", [2.0**-40, 1e-3, 0.5, 2.0, 8.0, 60.0, 700.0])
def test_realised_epsilon_never_exceeds_the_declared(epsilon: float) -> None:
    mech = PiecewiseSubMechanism(bounds=(0.0, 1.0), epsilon=epsilon)
    assert mech.grid.realised_ratio() <= exp_upper(epsilon)
    assert mech.realised_epsilon <= epsilon
    share = 1.0 / (math.exp(min(epsilon, 600.0) / 3.0) + 1.0)
    assert abs(mech.grid.window - max(1.0, share * mech.grid.cells)) <= 0.5


@pytest.mark.parametrize("epsilon", [0.5, 4.0])
@pytest.mark.parametrize("t", [-1.0, -0.73125, 0.0, 1.0 / 3.0, 1.0])
def test_unbiased_up_to_the_stated_bound_on_the_exact_law(epsilon: float, t: float) -> None:
    grid = calibrate(epsilon, split=3)
    assert abs(exact_mean(grid, t) - Fraction(t)) <= Fraction(grid.bias_bound())


@pytest.mark.parametrize("epsilon", [1.0, 2.0, 4.0, 8.0])
def test_worst_variance_is_the_papers_within_one_percent(epsilon: float) -> None:
    mech = PiecewiseSubMechanism(bounds=(-1.0, 1.0), epsilon=epsilon)
    assert mech.unit_variance == pytest.approx(pm_sub_worst_variance(epsilon), rel=0.01)


@pytest.mark.parametrize("epsilon", [2.0, 3.0, 4.0, 8.0])
def test_below_pm_at_every_input_from_eps_two(epsilon: float) -> None:
    sub = PiecewiseSubMechanism(bounds=(0.0, 1.0), epsilon=epsilon).variance_law()
    pm = PiecewiseMechanism(bounds=(0.0, 1.0), epsilon=epsilon).variance_law()
    assert sub.square < pm.square and sub.constant < pm.constant


@pytest.mark.parametrize("epsilon", [0.5, 4.0])
@pytest.mark.parametrize("x", [0.0, 25.0, 100.0])
def test_variance_law_and_error_match_draws(epsilon: float, x: float) -> None:
    """200,000 draws; each check allows 5 standard errors: false failure below 1e-5 each."""
    mech = PiecewiseSubMechanism(bounds=(0.0, 100.0), epsilon=epsilon)
    y, _ = draws_at_the_law(mech, x, seed=23)
    n = len(y)
    error = np.abs(y - x)
    assert error.mean() <= mech.expected_error + 5.0 * error.std() / math.sqrt(n)


def test_the_sampler_draws_each_cell_at_its_law() -> None:
    """Chi-square of the cell counts of one input on a 12-cell grid (11 df), 200,000 draws.

    The bound is the 0.999 quantile: false failure 1e-3 for a random seed. The
    mechanism's sampler is the grid's (``PiecewiseGrid.sample``), driven here directly.
    """
    grid = calibrate(2.0, 12, split=3)
    n, t = 200_000, 0.25
    base, up = grid.placement(np.array([t]))
    assert int(up[0]) == 0  # t = 0.25 places the window exactly: one law
    words = SeededSource(351).words(n, 3)
    seen = Counter(grid.sample(np.full(n, t), words).tolist())
    law = cell_law(grid, int(base[0]))
    statistic = sum((seen[k] - n * float(p)) ** 2 / (n * float(p)) for k, p in enumerate(law))
    assert statistic < stats.chi2.ppf(0.999, 11)


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_dp_inequality_holds_on_intervals(epsilon: float) -> None:
    """lo vs hi, 200,000 draws each; false failure <= 1e-6 per case."""
    mech = PiecewiseSubMechanism(bounds=(0.0, 100.0), epsilon=epsilon)
    low, high = draws(mech, 0.0, 200_000, seed=3), draws(mech, 100.0, 200_000, seed=4)
    assert interval_violation(low, high, epsilon, risk=1e-6) <= 0.0
    assert interval_violation(low, high, epsilon / 2.0, risk=1e-6) > 0.0


def test_interval_coverage_is_95_percent() -> None:
    """1,000 intervals of 400 records; binomial sd 0.0069, band +/- 3.6 sd: false failure 3e-4."""
    mech = PiecewiseSubMechanism(bounds=(0.0, 100.0), epsilon=4.0)
    values = np.linspace(-10.0, 90.0, 400)
    assert 0.925 <= coverage(mech, values, trials=1000, seed=7) <= 0.975


def test_outputs_are_the_fixed_grid_and_replays_are_identical() -> None:
    mech = PiecewiseSubMechanism(bounds=(-20.0, 60.0), epsilon=3.0)
    values = np.linspace(-30.0, 70.0, 5000)
    first = mech.release(values, SeededSource(3))
    assert np.array_equal(first, mech.release(values, SeededSource(3)))
    assert np.isin(first, mech.middle + mech.half * mech.grid.outputs()).all()
    assert mech.gamma_lower_bound < mech.expected_error

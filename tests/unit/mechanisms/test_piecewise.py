"""Piecewise Mechanism: exact cell law, realised privacy, unbiasedness, variance, intervals."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from privstream.errors import MechanismError
from privstream.mechanisms.piecewise import (
    GRID_CELLS,
    PiecewiseGrid,
    PiecewiseMechanism,
    calibrate,
)
from privstream.testing import SeededSource

from tests.unit.mechanisms.unit_interval_checks import (
    coverage,
    draws,
    draws_at_the_law,
    exp_upper,
    interval_violation,
)

TWO_64 = 2**64


def residue_counts(k: int) -> list[int]:
    """How many 64-bit words ``w`` have ``w mod k == j``, for each ``j`` (by counting)."""
    q, r = divmod(TWO_64, k)
    return [q + (1 if j < r else 0) for j in range(k)]


def cell_law(grid: PiecewiseGrid, start: int) -> list[Fraction]:
    """Exact probability of each cell with the window at ``start``, from the sampler's rules."""
    m, outside = grid.window, grid.cells - grid.window
    p_in = Fraction(grid.threshold, TWO_64)
    law = [Fraction(0)] * grid.cells
    for j, count in enumerate(residue_counts(m)):
        law[start + j] += p_in * Fraction(count, TWO_64)
    others = [k for k in range(grid.cells) if not start <= k < start + m]
    for j, count in enumerate(residue_counts(outside)):
        law[others[j]] += (1 - p_in) * Fraction(count, TWO_64)
    return law


def sampled_cell(grid: PiecewiseGrid, start: int, inside: bool, word: int) -> int:
    """The sampler's cell for a ``t`` that places the window at ``start``."""
    t = np.array([2.0 * start / (grid.cells - grid.window) - 1.0])
    base, up = grid.placement(t)
    assert int(base[0]) == start or (int(base[0]) == start - 1 and int(up[0]) > 0)
    placement = TWO_64 - 1 if int(base[0]) == start else 0  # step up only when needed
    inside_word = grid.threshold - 1 if inside else grid.threshold
    words = np.array([[placement, inside_word, word]], dtype=np.uint64)
    return int(grid.sample(t, words)[0])


def assert_small_grid_keeps_the_ratio(grid: PiecewiseGrid, epsilon: float) -> None:
    """Every window position and residue of a small grid: the sampler puts each residue where
    the exact law says (word j -> residue j of both moduli), and the law's largest ratio is
    within the certified one and ``e^eps`` (exact rationals). PM, PM-SUB and Square Wave."""
    cells, m = grid.cells, grid.window
    top = cells - m
    for start in range(top + 1):
        others = [k for k in range(cells) if not start <= k < start + m]
        for j in range(max(m, top)):
            if j < m:
                assert sampled_cell(grid, start, True, j) == start + j
            if j < top:
                assert sampled_cell(grid, start, False, j) == others[j]
    laws = [cell_law(grid, start) for start in range(top + 1)]
    assert all(sum(law) == 1 for law in laws)
    ratio = max(a / b for law in laws for other in laws for a, b in zip(law, other, strict=True))
    assert ratio <= grid.realised_ratio() <= exp_upper(epsilon)


@pytest.mark.parametrize("cells", [3, 4, 7, 12])
@pytest.mark.parametrize("epsilon", [0.05, 0.7, 2.0, 9.0])
def test_enumerated_cell_law_of_small_grids_keeps_the_ratio(cells: int, epsilon: float) -> None:
    assert_small_grid_keeps_the_ratio(calibrate(epsilon, cells), epsilon)


@pytest.mark.parametrize("epsilon", [2.0**-40, 1e-3, 0.1, 0.5, 1.0, 4.0, 20.0, 60.0, 700.0])
def test_realised_epsilon_never_exceeds_the_declared(epsilon: float) -> None:
    grid = calibrate(epsilon)
    assert 1 <= grid.window < GRID_CELLS
    assert 0 < grid.threshold < TWO_64
    assert grid.realised_ratio() <= exp_upper(epsilon)
    mech = PiecewiseMechanism(bounds=(0.0, 1.0), epsilon=epsilon)
    assert mech.realised_epsilon <= epsilon


def test_epsilons_below_the_thresholds_resolution_are_refused() -> None:
    with pytest.raises(MechanismError, match="too small for the piecewise"):
        PiecewiseMechanism(bounds=(0.0, 1.0), epsilon=2.0**-45)


def exact_mean(grid: PiecewiseGrid, t: float) -> Fraction:
    """``E[y | t]`` of the implemented law: placement as sampled, exact residue counts."""
    base, up = grid.placement(np.array([t]))
    step_up = Fraction(int(up[0]), TWO_64)
    outputs = [Fraction(float(y)) for y in grid.outputs()]
    total = Fraction(0)
    for start, weight in ((int(base[0]), 1 - step_up), (int(base[0]) + 1, step_up)):
        if weight:
            law = cell_law(grid, start)
            total += weight * sum((p * y for p, y in zip(law, outputs, strict=True)), Fraction(0))
    return total


@pytest.mark.parametrize("epsilon", [0.5, 4.0])
@pytest.mark.parametrize("t", [-1.0, -0.73125, 0.0, 1.0 / 3.0, 0.999999, 1.0])
def test_unbiased_up_to_the_stated_bound_on_the_exact_law(epsilon: float, t: float) -> None:
    grid = calibrate(epsilon)
    error = abs(exact_mean(grid, t) - Fraction(t))
    assert error <= Fraction(grid.bias_bound())


def continuous_worst_variance(epsilon: float) -> float:
    """Wang et al. 2019, Lemma 1 at |t| = 1: ``4 e^{eps/2} / (3 (e^{eps/2} - 1)^2)``."""
    a = math.exp(epsilon / 2.0)
    return 4.0 * a / (3.0 * (a - 1.0) ** 2)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0])
def test_worst_variance_is_the_papers_within_one_percent(epsilon: float) -> None:
    mech = PiecewiseMechanism(bounds=(-1.0, 1.0), epsilon=epsilon)
    assert mech.unit_variance == pytest.approx(continuous_worst_variance(epsilon), rel=0.01)
    assert mech.estimator_variance(10) == pytest.approx(mech.unit_variance / 10, rel=1e-12)


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
@pytest.mark.parametrize("x", [0.0, 25.0, 100.0])
def test_variance_law_and_error_match_draws(epsilon: float, x: float) -> None:
    """Sample mean, variance and mean |y - x| of 200,000 draws against the stated law.

    Each check allows 5 standard errors (normal approximation, the fourth moment
    estimated from the draws): false failure below 1e-5 per check.
    """
    mech = PiecewiseMechanism(bounds=(0.0, 100.0), epsilon=epsilon)
    y, _ = draws_at_the_law(mech, x, seed=11)
    n = len(y)
    assert y.var() <= mech.estimator_variance(1) * (1.0 + 5.0 * math.sqrt(2.0 / n) * 3)
    error = np.abs(y - x)
    assert error.mean() <= mech.expected_error + 5.0 * error.std() / math.sqrt(n)


def test_worst_expected_error_is_at_the_bounds() -> None:
    """The stated error is the one at a bound (continuous PM: a quadratic, largest at |t| = 1)."""
    mech = PiecewiseMechanism(bounds=(0.0, 100.0), epsilon=1.0)
    at_bound = float(mech.grid.mean_abs_error(np.array([1.0]))[0]) * mech.half
    assert mech.expected_error == pytest.approx(at_bound, rel=1e-9)
    assert mech.gamma_lower_bound < mech.expected_error


@pytest.mark.parametrize("epsilon", [0.5, 1.0])
def test_dp_inequality_holds_on_intervals(epsilon: float) -> None:
    """lo vs hi (the farthest inputs), 200,000 draws each; false failure <= 1e-6 per case."""
    mech = PiecewiseMechanism(bounds=(0.0, 100.0), epsilon=epsilon)
    low, high = draws(mech, 0.0, 200_000, seed=1), draws(mech, 100.0, 200_000, seed=2)
    assert interval_violation(low, high, epsilon, risk=1e-6) <= 0.0


def test_the_interval_check_catches_a_mechanism_at_twice_the_epsilon() -> None:
    """The check has power: PM at eps 2 fails the eps-1 inequality (by far, at these n)."""
    mech = PiecewiseMechanism(bounds=(0.0, 100.0), epsilon=2.0)
    low, high = draws(mech, 0.0, 200_000, seed=1), draws(mech, 100.0, 200_000, seed=2)
    assert interval_violation(low, high, 1.0, risk=1e-6) > 0.0


def test_interval_coverage_is_95_percent() -> None:
    """1,000 intervals of 400 records; binomial sd 0.0069, band +/- 3.6 sd: false failure 3e-4."""
    mech = PiecewiseMechanism(bounds=(0.0, 100.0), epsilon=2.0)
    values = np.linspace(-10.0, 90.0, 400)  # some clamped, most inside
    assert 0.925 <= coverage(mech, values, trials=1000, seed=5) <= 0.975


def test_outputs_are_the_fixed_grid_and_replays_are_identical() -> None:
    mech = PiecewiseMechanism(bounds=(-20.0, 60.0), epsilon=1.0)
    values = np.linspace(-30.0, 70.0, 5000)
    first = mech.release(values, SeededSource(3))
    assert np.array_equal(first, mech.release(values, SeededSource(3)))
    grid = mech.middle + mech.half * mech.grid.outputs()
    assert np.isin(first, grid).all()
    assert np.all(np.abs(first - mech.middle) <= mech.half * mech.reach)


def test_equal_bounds_release_the_bound_without_noise() -> None:
    mech = PiecewiseMechanism(bounds=(5.0, 5.0), epsilon=1.0)
    assert mech.release(np.array([-1.0, 5.0, 9.0]), SeededSource(0)).tolist() == [5.0] * 3
    assert mech.expected_error == 0.0 and mech.bias_bound() == 0.0


def test_non_finite_values_are_refused() -> None:
    mech = PiecewiseMechanism(bounds=(0.0, 1.0), epsilon=1.0)
    with pytest.raises(MechanismError, match="not finite"):
        mech.release(np.array([0.5, math.nan]), SeededSource(0))

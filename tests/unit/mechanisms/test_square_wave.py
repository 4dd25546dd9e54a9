"""Square Wave (issue 35, item 3): PM's grid at SW's window, reports near the value.

The ratio is checked on the exact enumerated law of small grids (every window
position, every residue of the sampler's words, in exact rationals) and on
``law`` of the 4096-cell grid; the sampling test uses a fixed seed and states
its false-failure probability.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from privstream.errors import MechanismError
from privstream.mechanisms.piecewise import grid_for_share
from privstream.mechanisms.square_wave import SquareWaveMechanism, window_share
from privstream.testing import SeededSource
from scipy import stats

from tests.unit.mechanisms.test_piecewise import (
    assert_small_grid_keeps_the_ratio,
)


def continuous_b(epsilon: float) -> float:
    """Li et al. (2020), Thm. 2, as printed:
    ``(eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps))``."""
    e = math.exp(epsilon)
    return (epsilon * e - e + 1.0) / (2.0 * e * (e - 1.0 - epsilon))


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 1.0, 2.0, 4.0, 8.0, 30.0])
def test_the_window_share_is_the_papers(epsilon: float) -> None:
    b = continuous_b(epsilon)
    assert window_share(epsilon) == pytest.approx(2 * b / (1 + 2 * b), rel=1e-9)


@pytest.mark.parametrize("epsilon", [2.0**-40, 1e-6, 700.0, 1e6])
def test_the_window_share_stays_finite_at_the_extremes(epsilon: float) -> None:
    assert 0.0 <= window_share(epsilon) <= 0.5


@pytest.mark.parametrize("cells", [4, 7, 12])
@pytest.mark.parametrize("epsilon", [0.05, 0.7, 2.0, 9.0])
def test_enumerated_cell_law_of_small_grids_keeps_the_ratio(cells: int, epsilon: float) -> None:
    assert_small_grid_keeps_the_ratio(
        grid_for_share(epsilon, window_share(epsilon), cells), epsilon
    )


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0])
def test_the_law_of_the_full_grid_keeps_the_dp_inequality(epsilon: float) -> None:
    mech = SquareWaveMechanism(bounds=(0.0, 1.0), epsilon=epsilon)
    law = mech.law(np.linspace(0.0, 1.0, 65))
    assert np.allclose(law.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    ratio = law.max(axis=0) / law.min(axis=0)
    assert float(ratio.max()) <= math.exp(epsilon) * (1 + 1e-9)
    assert mech.realised_epsilon <= epsilon


def test_sampled_cells_follow_the_law() -> None:
    """Chi-square over 64 pooled cell groups, 200,000 draws at v = 0.3 (false failure 1e-4)."""
    mech = SquareWaveMechanism(bounds=(10.0, 20.0), epsilon=1.0)
    released = mech.release(np.full(200_000, 13.0), SeededSource(41))
    cells = mech.cells_of(released)
    assert np.all(cells >= 0)
    observed = np.bincount(cells, minlength=4096).reshape(64, -1).sum(axis=1)
    expected = 200_000 * mech.law(np.array([0.3]))[0].reshape(64, -1).sum(axis=1)
    assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_reports_are_a_fixed_set_near_the_value() -> None:
    mech = SquareWaveMechanism(bounds=(-5.0, 5.0), epsilon=4.0)
    values = np.array([-50.0, -5.0, 0.0, 2.5, 5.0, 1e300] * 500)
    released = mech.release(values, SeededSource(3))
    assert np.isin(released, mech.release(np.linspace(-5, 5, 4096 * 8), SeededSource(4))).mean() > 0
    assert np.all(mech.cells_of(released) >= 0)
    b = mech.params()["half_width_b"]
    assert np.all((released >= -5.0 - 10 * float(b)) & (released <= 5.0 + 10 * float(b)))
    # at eps 4 the window holds ~77% of the reports: most sit within b of the clamped value
    clamped = np.clip(values, -5.0, 5.0)
    assert np.mean(np.abs(released - clamped) <= 10 * float(b) + 1e-9) > 0.7
    assert np.all(mech.cells_of(np.array([0.1234567, 99.0])) == -1)


def test_error_is_above_the_lower_bound_and_the_widest_bounds_stay_finite() -> None:
    for eps in (0.1, 1.0, 8.0):
        mech = SquareWaveMechanism(bounds=(0.0, 100.0), epsilon=eps)
        assert mech.gamma_lower_bound <= mech.expected_error <= 100.0
    widest = SquareWaveMechanism(bounds=(-4e301, 4e301), epsilon=2.0**-40)  # b' near 1/2
    released = widest.release(np.array([-4e301, 0.0, 4e301]), SeededSource(5))
    assert np.all(np.isfinite(released))
    with pytest.raises(MechanismError, match="epsilon"):
        SquareWaveMechanism(bounds=(0.0, 1.0), epsilon=2.0**-41)


def test_equal_bounds_release_the_bound_without_noise() -> None:
    mech = SquareWaveMechanism(bounds=(3.0, 3.0), epsilon=1.0)
    assert mech.release(np.array([1.0, 9.0]), SeededSource(1)).tolist() == [3.0, 3.0]

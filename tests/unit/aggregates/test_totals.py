"""Calibration of the noisy totals, with the DP inequality checked on exact pmf ratios.

The discrete Laplace pmf is exact and closed-form (``tests.support.aggregates.pmf``),
so the privacy loss of a shift is computed, not sampled: for every output
``z`` in a range covering all but ``e^-60`` of the mass, ``p(z) / p(z - s)``
must stay within ``e^eps``, and with delta the hockey-stick sum within delta.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from privstream.aggregates.sensitivity import Sensitivity
from privstream.aggregates.totals import NoisyTotal, calibrate_total, half_width
from privstream.errors import MechanismError
from privstream.mechanisms.discrete_laplace import EPSILON_SLACK
from privstream.testing import SeededSource

from tests.support.aggregates import pmf


def _zs(t: float, shift: int) -> range:
    reach = int(60 * t) + shift + 2
    return range(-reach, reach + 1)


def max_loss(t: float, shift: int) -> float:
    """``max_z ln p(z) / p(z - shift)`` over the range."""
    return max(math.log(pmf(t, z) / pmf(t, z - shift)) for z in _zs(t, shift))


@pytest.mark.parametrize(("epsilon", "shift"), [(1.0, 1), (0.1, 1), (0.5, 6), (2.0, 42)])
def test_one_cell_pure_calibration_is_delta_over_epsilon_and_meets_the_bound(
    epsilon: float, shift: int
) -> None:
    noise = calibrate_total(epsilon, 0.0, Sensitivity(1, shift), cells=1)
    assert noise.t >= shift / epsilon
    assert noise.t == pytest.approx(shift / epsilon, rel=1e-9)
    assert max_loss(noise.t, shift) <= epsilon
    assert max_loss(noise.t, -shift) <= epsilon


@pytest.mark.parametrize(("epsilon", "delta", "shift"), [(1.0, 1e-3, 1), (0.5, 1e-5, 4)])
def test_one_cell_with_delta_uses_the_exact_profile(
    epsilon: float, delta: float, shift: int
) -> None:
    noise = calibrate_total(epsilon, delta, Sensitivity(1, shift), cells=1)
    assert noise.t < shift / epsilon  # less noise than pure
    bound = math.exp(epsilon)
    divergence = math.fsum(
        max(0.0, pmf(noise.t, z) - bound * pmf(noise.t, z - shift)) for z in _zs(noise.t, shift)
    )
    assert divergence <= delta


def test_many_cells_split_the_l1_shift_and_stay_pure() -> None:
    """A unit spread over cells: the joint loss is the sum of the cells' losses."""
    epsilon, cells, l1 = 0.7, 12, 6
    noise = calibrate_total(epsilon, 1e-6, Sensitivity(3, 2), cells=cells)  # delta unused
    assert noise.t * (epsilon - cells * EPSILON_SLACK) == pytest.approx(l1, rel=1e-9)
    for split in ([6], [3, 3], [1, 1, 1, 1, 1, 1], [2, 4]):
        assert math.fsum(max_loss(noise.t, s) for s in split) <= epsilon


def test_realised_delta_is_zero_unless_the_exact_profile_was_used() -> None:
    assert NoisyTotal.build("count", 1.0, 1e-6, Sensitivity(1, 1), 1).realised_delta == 1e-6
    assert NoisyTotal.build("count", 1.0, 1e-6, Sensitivity(1, 1), 2).realised_delta == 0.0
    correlated = Sensitivity(1, 1, 0.5, 3)
    assert NoisyTotal.build("count", 1.0, 1e-6, correlated, 1).realised_delta == 0.0


@pytest.mark.parametrize("t", [0.3, 1.0, 2.0, 17.5, 400.0])
def test_the_95_half_width_is_the_least_covering_integer(t: float) -> None:
    noise = calibrate_total(1.0 / t, 0.0, Sensitivity(1, 1), 1)
    k = half_width(noise)
    inside = math.fsum(pmf(noise.t, z) for z in range(-k, k + 1))
    assert inside >= 0.95
    if k > 0:
        assert inside - pmf(noise.t, k) - pmf(noise.t, -k) < 0.95


def test_the_stated_errors_are_the_discrete_laplace_moments() -> None:
    total = NoisyTotal.build("sum", 0.5, 0.0, Sensitivity(1, 3), 1, step=0.25)
    a = math.exp(-1.0 / total.noise.t)
    assert total.expected_error == pytest.approx(2 * a / (1 - a * a) * 0.25)
    assert total.std_error == pytest.approx(math.sqrt(2 * a) / (1 - a) * 0.25)
    assert total.scale == pytest.approx(total.noise.t * 0.25)


def test_the_sampled_variance_matches_the_stated_one() -> None:
    """200,000 draws at t = 4 (seed fixed): the sample variance within 3% of the stated one
    (its relative sd is sqrt((kurtosis - 1)/n) ~ 0.5%: 6 sd) and the mean within 0.08 (sd
    0.0126: 6 sd); false-failure probability below 1e-8 (normal approximation)."""
    total = NoisyTotal.build("count", 0.25, 0.0, Sensitivity(1, 1), 1)
    draws = total.draw(SeededSource(34), 200_000).astype(np.float64)
    assert abs(draws.var() / total.std_error**2 - 1.0) < 0.03
    assert abs(draws.mean()) < 0.08


def test_no_noise_can_serve_an_epsilon_too_small_for_its_cells() -> None:
    with pytest.raises(MechanismError, match="raise epsilon"):
        calibrate_total(1e-13, 0.0, Sensitivity(1, 1), cells=100_000)

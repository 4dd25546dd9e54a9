"""Duchi et al. standalone (issue 35, item 2): the realised law, the sampler, the estimator.

The exact-law tests read the threshold each input gets off the real
``release`` (the word just below it gives ``+B``, the word at it ``-B``), so the
output law of every input is ``P(+B) = T / 2^64`` in exact rationals. The
statistical tests use fixed seeds; each states its false-failure probability
for a random one.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from numpy.typing import NDArray
from privstream.errors import MechanismError
from privstream.estimate.unit_mean import law_variance
from privstream.mechanisms.base import exp_lower_bound
from privstream.mechanisms.duchi import DuchiMechanism
from privstream.mechanisms.hybrid import HybridMechanism
from privstream.mechanisms.piecewise import PiecewiseMechanism
from privstream.testing import SeededSource
from scipy import stats

from tests.unit.mechanisms.unit_interval_checks import (
    coverage,
    draws,
    draws_at_the_law,
    exp_upper,
    interval_violation,
)

TWO_64 = 2**64
#: inputs on ``[-1, 1]``: the bounds, their float neighbours, the centre, odd points
INPUTS = [-1.0, -1.0 + 2.0**-52, -0.75, -0.2, 0.0, 2.0**-60, 0.3, 0.7071067811865476, 1.0]


class FixedWords:
    """A noise source that returns the given words (one ``words`` call)."""

    def __init__(self, words: NDArray[np.uint64]) -> None:
        self.rows = words

    def words(self, n: int, k: int) -> NDArray[np.uint64]:
        assert self.rows.shape == (n, k)
        return self.rows

    def more_words(self, rows: NDArray[np.int64], start: int, k: int) -> NDArray[np.uint64]:
        raise AssertionError("duchi draws once")


def realised_up(mech: DuchiMechanism, t: float) -> Fraction:
    """``P(+B | t)`` of the implemented sampler: the cut read off ``release`` itself."""
    cut = int(mech.coin.threshold(np.array([t]))[0])
    x = mech.middle + mech.half * t
    words = np.array([[cut - 1], [cut]], dtype=np.uint64)
    below, at = mech.release(np.array([x, x]), FixedWords(words))
    b = mech.middle + mech.half * mech.coin.magnitude
    assert below == b and at == 2 * mech.middle - b  # +B below the cut, -B from it on
    return Fraction(cut, TWO_64)


@pytest.mark.parametrize("epsilon", [2.0**-30, 0.1, 0.61, 1.5, 2.0, 4.0, 8.0, 40.0])
def test_the_realised_law_keeps_every_ratio_within_e_eps_and_reaches_it(epsilon: float) -> None:
    mech = DuchiMechanism(bounds=(-1.0, 1.0), epsilon=epsilon)
    ups = [realised_up(mech, t) for t in INPUTS]
    e = exp_lower_bound(epsilon)
    worst = Fraction(0)
    for first in ups:
        for second in ups:
            for p, q in ((first, second), (1 - first, 1 - second)):
                assert p <= e * q
                worst = max(worst, p / q)
    # the bounds come within float rounding of the certified ratio, never past it
    assert worst <= mech.coin.realised_ratio() <= e
    assert float(worst) == pytest.approx(float(mech.coin.realised_ratio()), rel=1e-12)
    # L is an integer: the realised epsilon falls short of eps by at most ~1 / L
    assert epsilon - 2.0 / mech.coin.low <= mech.realised_epsilon <= epsilon
    assert e <= exp_upper(epsilon)  # the reference: E is below e^eps


def test_epsilons_below_the_thresholds_resolution_are_refused_by_name() -> None:
    with pytest.raises(MechanismError, match="too small for the duchi mechanism"):
        DuchiMechanism(bounds=(0.0, 1.0), epsilon=2.0**-45)


@pytest.mark.parametrize("epsilon", [0.3, 2.0, 8.0])
def test_unbiased_and_the_variance_law_holds_on_the_exact_law(epsilon: float) -> None:
    mech = DuchiMechanism(bounds=(-1.0, 1.0), epsilon=epsilon)
    b = Fraction(mech.coin.magnitude)
    law = mech.variance_law()
    slope, constant = law.square, law.constant
    assert slope == -1.0
    for t in INPUTS:
        up = realised_up(mech, t)
        mean = b * (2 * up - 1)
        assert abs(mean - Fraction(t)) <= Fraction(mech.unit_bias())
        variance = b * b - mean * mean
        law = Fraction(constant) - Fraction(t) ** 2
        assert variance <= law and float(law - variance) < 1e-12
    assert mech.unit_variance == constant and mech.reach == mech.coin.magnitude


def test_the_sampler_draws_each_input_at_its_threshold() -> None:
    """Chi-square of the +B counts of 5 inputs (5 df), 100,000 draws each, at eps 2.

    The bound is the 0.999 quantile: false failure 1e-3 for a random seed.
    """
    mech = DuchiMechanism(bounds=(0.0, 10.0), epsilon=2.0)
    n, statistic = 100_000, 0.0
    for i, x in enumerate([0.0, 2.5, 5.0, 7.5, 10.0]):
        y = mech.release(np.full(n, x), SeededSource(350 + i))
        up = float(realised_up(mech, (x - mech.middle) / mech.half))
        seen = int(np.count_nonzero(y > mech.middle))
        statistic += (seen - n * up) ** 2 / (n * up * (1 - up))
    assert statistic < stats.chi2.ppf(0.999, 5)


def test_the_chi_square_sees_a_sampler_with_a_shifted_threshold() -> None:
    mech = DuchiMechanism(bounds=(0.0, 10.0), epsilon=2.0)
    n = 100_000
    y = mech.release(np.full(n, 5.0), SeededSource(350))
    biased = 0.5 + 0.01  # one hundredth more +B than the law: 6.3 standard errors off
    seen = int(np.count_nonzero(y > mech.middle))
    assert (seen - n * biased) ** 2 / (n * biased * (1 - biased)) > stats.chi2.ppf(0.999, 1)


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
@pytest.mark.parametrize("x", [0.0, 50.0, 90.0])
def test_estimator_bias_and_variance_match_the_law(epsilon: float, x: float) -> None:
    """200,000 draws; each check allows 5 standard errors: false failure below 1e-5 each."""
    mech = DuchiMechanism(bounds=(0.0, 100.0), epsilon=epsilon)
    y, law = draws_at_the_law(mech, x, seed=22)
    n = len(y)
    # the estimate's plug-in: c - mean(y)^2 (y^2 is B^2 always), close to the law
    unit = (y - mech.middle) / mech.half
    plug_in = law_variance(mech, float(unit.mean()), float(np.mean(unit**2)))
    assert plug_in == pytest.approx(law / mech.half**2, abs=10.0 * math.sqrt(law / n))
    error = np.abs(y - x)
    assert error.mean() <= mech.expected_error + 5.0 * error.std() / math.sqrt(n)


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_interval_coverage_is_95_percent_and_conservative_on_spread_data(epsilon: float) -> None:
    """1,000 intervals of 400 records; binomial sd 0.0069, band +/- 3.6 sd: false failure 3e-4.

    Binary reports say nothing of ``mean(t^2)``: the plug-in ``c - mean(y)^2`` is exact for
    data at one value and an upper bound otherwise (bimodal data at the bounds: ``mean(t)``
    ~ 0 but ``mean(t^2)`` = 1), so there the interval only over-covers.
    """
    mech = DuchiMechanism(bounds=(0.0, 100.0), epsilon=epsilon)
    assert 0.925 <= coverage(mech, np.full(400, 90.0), trials=1000, seed=8) <= 0.975
    bimodal = np.r_[np.full(200, -5.0), np.full(200, 100.0)]
    assert coverage(mech, bimodal, trials=1000, seed=9) >= 0.925


@pytest.mark.parametrize("epsilon", [0.4, 1.0])
def test_dp_inequality_holds_on_intervals(epsilon: float) -> None:
    """lo vs hi, 200,000 draws each; false failure <= 1e-6 per case."""
    mech = DuchiMechanism(bounds=(0.0, 100.0), epsilon=epsilon)
    low, high = draws(mech, 0.0, 200_000, seed=3), draws(mech, 100.0, 200_000, seed=4)
    assert interval_violation(low, high, epsilon, risk=1e-6) <= 0.0
    assert interval_violation(low, high, epsilon / 2.0, risk=1e-6) > 0.0


def test_outputs_are_two_values_and_replays_are_identical() -> None:
    mech = DuchiMechanism(bounds=(-20.0, 60.0), epsilon=1.0)
    values = np.linspace(-30.0, 70.0, 5000)
    first = mech.release(values, SeededSource(3))
    assert np.array_equal(first, mech.release(values, SeededSource(3)))
    b = mech.coin.magnitude
    assert set(first.tolist()) == {mech.middle - mech.half * b, mech.middle + mech.half * b}
    assert mech.gamma_lower_bound < mech.expected_error
    assert mech.worst_t == 0.0 and mech.expected_error == pytest.approx(mech.half * b)


def test_it_is_hybrids_coin_below_eps_star_and_wins_at_the_bounds_above() -> None:
    """Below eps* HM is Duchi alone; from eps ~1 Duchi has the least variance at |t| = 1."""
    low = DuchiMechanism(bounds=(0.0, 1.0), epsilon=0.4)
    hybrid = HybridMechanism(bounds=(0.0, 1.0), epsilon=0.4)
    assert low.coin == hybrid.coin
    low_law, hybrid_law = low.variance_law(), hybrid.variance_law()
    assert (low_law.square, low_law.constant) == pytest.approx(
        (hybrid_law.square, hybrid_law.constant), rel=1e-12
    )
    for epsilon in (1.5, 2.0, 4.0):
        at_bound = {
            name: cls(bounds=(0.0, 1.0), epsilon=epsilon).variance_law().at(1.0)
            for name, cls in (
                ("duchi", DuchiMechanism),
                ("hybrid", HybridMechanism),
                ("piecewise", PiecewiseMechanism),
            )
        }
        assert min(at_bound, key=at_bound.__getitem__) == "duchi", at_bound

"""Three-Outputs (issue 35, item 2): the realised law, the DP inequality, the estimator.

The exact-law tests read the two cuts each input gets off the real ``release``
(the words just below and at ``far(t)`` and ``far(t) + zero(t)``), so the
output law of every input is exact rationals of ``2^64``. The statistical
tests use fixed seeds; each states its false-failure probability for a random
one.
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
from privstream.mechanisms.three_outputs import ThreeOutputsMechanism, zero_share
from privstream.testing import SeededSource
from scipy import stats

from tests.unit.mechanisms.unit_interval_checks import coverage, draws, interval_violation

TWO_64 = 2**64
#: a grid on [-1, 1] with both bounds, their float neighbours, the centre and odd points
INPUTS = sorted(
    {*np.linspace(-1.0, 1.0, 41).tolist(), -1.0 + 2.0**-52, 1.0 - 2.0**-53, 2.0**-60, -0.3183}
)
EPSILONS = [2.0**-30, 0.3, 0.7, 1.0, 1.5, 2.0, 3.0, 8.0, 30.0]


class FixedWords:
    """A noise source that returns the given words (one ``words`` call)."""

    def __init__(self, words: NDArray[np.uint64]) -> None:
        self.rows = words

    def words(self, n: int, k: int) -> NDArray[np.uint64]:
        assert self.rows.shape == (n, k)
        return self.rows

    def more_words(self, rows: NDArray[np.int64], start: int, k: int) -> NDArray[np.uint64]:
        raise AssertionError("three_outputs draws once")


def realised_law(mech: ThreeOutputsMechanism, t: float) -> tuple[Fraction, Fraction, Fraction]:
    """``(P(-C), P(0), P(+C))`` of the implemented sampler at ``t``, cuts read off ``release``."""
    far, zero = (int(c[0]) for c in mech.law.counts(np.array([t])))
    cuts = [far - 1, far, far + zero - 1, far + zero]
    words = np.array([[max(w, 0)] for w in cuts], dtype=np.uint64)
    x = mech.middle + mech.half * t
    out = (mech.release(np.full(4, x), FixedWords(words)) - mech.middle) / mech.half
    c, side = mech.law.magnitude, -1.0 if t < 0 else 1.0
    if far > 0:
        assert out[0] == pytest.approx(-side * c, rel=1e-12)
    assert out[3] == pytest.approx(side * c, rel=1e-12)  # the near output from far + zero on
    if zero > 0:  # 0 from far on, up to far + zero - 1
        assert abs(out[1]) < 1e-9 and abs(out[2]) < 1e-9
    else:
        assert out[1] == pytest.approx(side * c, rel=1e-12)
    probs = (Fraction(far, TWO_64), Fraction(zero, TWO_64), Fraction(TWO_64 - far - zero, TWO_64))
    low, _, high = probs
    return (high, probs[1], low) if t < 0 else probs


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_every_output_ratio_on_the_grid_is_within_e_eps_and_the_bounds_reach_it(
    epsilon: float,
) -> None:
    """The DP inequality on the exact output probabilities of every pair of grid inputs."""
    mech = ThreeOutputsMechanism(bounds=(-1.0, 1.0), epsilon=epsilon)
    laws = [realised_law(mech, t) for t in INPUTS]
    e = exp_lower_bound(epsilon)
    worst = Fraction(0)
    for output in range(3):
        column = [law[output] for law in laws]
        if max(column) == 0:
            continue  # p = 0: 0 is never reported
        assert min(column) > 0
        worst = max(worst, max(column) / min(column))
    assert worst <= mech.law.realised_ratio() <= e
    # attained at t = -1, 0, 1 (on the grid) up to the float rounding of the count steps
    assert float(worst) == pytest.approx(float(mech.law.realised_ratio()), rel=1e-12)
    # the counts are integers: the realised epsilon falls short by at most ~2 / the least
    smallest = min(mech.law.far_edge, mech.law.zero_edge or TWO_64)
    assert epsilon - 2.0 / smallest <= mech.realised_epsilon <= epsilon


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_unbiased_and_the_variance_law_holds_on_the_exact_law(epsilon: float) -> None:
    mech = ThreeOutputsMechanism(bounds=(-1.0, 1.0), epsilon=epsilon)
    c = Fraction(mech.law.magnitude)
    law = mech.variance_law()
    assert law.square == -1.0
    for t in INPUTS:
        minus, zero, plus = realised_law(mech, t)
        assert minus + zero + plus == 1
        mean = c * (plus - minus)
        assert abs(mean - Fraction(t)) <= Fraction(mech.unit_bias())
        variance = c * c * (plus + minus) - mean * mean
        bound = Fraction(law.at(abs(t)))
        assert variance <= bound and float(bound - variance) < 1e-9 * max(1.0, float(c * c))
    assert mech.unit_variance == law.worst() and mech.reach == mech.law.magnitude


@pytest.mark.parametrize("epsilon", [0.8, 1.0, 2.0, 4.0])
def test_the_law_is_the_papers(epsilon: float) -> None:
    """Zhao et al. 2020: ``C = e^eps (e^eps + 1) / ((e^eps - 1)(e^eps - p))``, ``P(0 | t) =
    p - p (1 - e^-eps) |t|``, and ``P(+C | 1) = (e^eps - p) / (e^eps + 1)``."""
    mech = ThreeOutputsMechanism(bounds=(-1.0, 1.0), epsilon=epsilon)
    e, p = math.exp(epsilon), zero_share(epsilon)
    assert 0.0 < p < e / (e + 2.0)
    assert mech.law.magnitude == pytest.approx(e * (e + 1) / ((e - 1) * (e - p)), rel=1e-9)
    far_edge, near_edge = (e - p) / (e * (e + 1)), (e - p) / (e + 1)
    for t in (0.0, 0.25, -0.6, 1.0, -1.0):
        minus, zero, plus = (float(q) for q in realised_law(mech, t))
        far = (1 - p) / 2 + (far_edge - (1 - p) / 2) * abs(t)
        near = (1 - p) / 2 + (near_edge - (1 - p) / 2) * abs(t)
        assert (plus, minus) == pytest.approx((near, far) if t >= 0 else (far, near), abs=1e-9)
        assert zero == pytest.approx(p - p * (1 - 1 / e) * abs(t), abs=1e-9)


def test_below_ln_2_it_is_duchis_report() -> None:
    """The least worst-case variance is at p = 0 there: Duchi's coin, the same counts."""
    for epsilon in (0.1, 0.5, 0.69):
        mech = ThreeOutputsMechanism(bounds=(0.0, 1.0), epsilon=epsilon)
        duchi = DuchiMechanism(bounds=(0.0, 1.0), epsilon=epsilon)
        assert mech.law.zero_centre == 0 and mech.law.far_edge == duchi.coin.low
        assert mech.law.magnitude == duchi.coin.magnitude


def test_it_beats_the_menus_worst_case_between_pm_and_duchi() -> None:
    """At eps 1 to 2 its worst variance is below hybrid's and duchi's (why auto ranks it)."""
    for epsilon in (1.0, 1.5, 2.0):
        mech = ThreeOutputsMechanism(bounds=(0.0, 1.0), epsilon=epsilon)
        duchi = DuchiMechanism(bounds=(0.0, 1.0), epsilon=epsilon)
        assert mech.unit_variance < duchi.unit_variance


def test_epsilons_below_the_thresholds_resolution_are_refused_by_name() -> None:
    with pytest.raises(MechanismError, match="too small for the three_outputs mechanism"):
        ThreeOutputsMechanism(bounds=(0.0, 1.0), epsilon=2.0**-45)


def test_the_sampler_draws_each_input_by_its_law() -> None:
    """Chi-square of the three output counts of 5 inputs (10 df), 100,000 draws each, eps 1.5.

    The bound is the 0.999 quantile: false failure 1e-3 for a random seed.
    """
    mech = ThreeOutputsMechanism(bounds=(0.0, 10.0), epsilon=1.5)
    n, statistic = 100_000, 0.0
    for i, x in enumerate([0.0, 2.5, 5.0, 7.5, 10.0]):
        y = (mech.release(np.full(n, x), SeededSource(450 + i)) - mech.middle) / mech.half
        expected = [float(q) * n for q in realised_law(mech, (x - mech.middle) / mech.half)]
        seen = [np.count_nonzero(y < -0.5), np.count_nonzero(np.abs(y) < 0.5)]
        seen.append(n - sum(seen))
        statistic += sum((o - f) ** 2 / f for o, f in zip(seen, expected, strict=True))
    assert statistic < stats.chi2.ppf(0.999, 10)


def test_the_chi_square_sees_a_sampler_that_reports_zero_too_rarely() -> None:
    """One hundredth of the zeros moved to +C at t = 0.5 (6 standard errors at 100,000)."""
    mech = ThreeOutputsMechanism(bounds=(0.0, 10.0), epsilon=1.5)
    n = 100_000
    y = (mech.release(np.full(n, 7.5), SeededSource(450)) - mech.middle) / mech.half
    minus, zero, plus = (float(q) for q in realised_law(mech, 0.5))
    biased = [minus * n, (zero - 0.01) * n, (plus + 0.01) * n]
    seen = [np.count_nonzero(y < -0.5), np.count_nonzero(np.abs(y) < 0.5)]
    seen.append(n - sum(seen))
    statistic = sum((o - f) ** 2 / f for o, f in zip(seen, biased, strict=True))
    assert statistic > stats.chi2.ppf(0.999, 2)


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
@pytest.mark.parametrize("x", [0.0, 30.0, 50.0, 100.0])
def test_the_mean_is_unbiased_and_the_variance_matches_the_law(epsilon: float, x: float) -> None:
    """200,000 draws; each check allows 5 standard errors: false failure below 1e-5 each."""
    mech = ThreeOutputsMechanism(bounds=(0.0, 100.0), epsilon=epsilon)
    y = draws(mech, x, 200_000, seed=35)
    n, t = len(y), (x - mech.middle) / mech.half
    law = mech.half**2 * mech.variance_law().at(abs(t))
    assert abs(y.mean() - x) <= 5.0 * math.sqrt(law / n)
    fourth = float(np.mean((y - y.mean()) ** 4))
    assert abs(y.var() - law) <= 5.0 * math.sqrt((fourth - law**2) / n)
    unit = (y - mech.middle) / mech.half
    plug_in = law_variance(mech, float(unit.mean()), float(np.mean(unit**2)))
    assert plug_in == pytest.approx(law / mech.half**2, abs=10.0 * math.sqrt(law / n))
    error = np.abs(y - x)
    assert error.mean() <= mech.expected_error + 5.0 * error.std() / math.sqrt(n)


def test_interval_coverage_is_95_percent_and_conservative_on_spread_data() -> None:
    """1,000 intervals of 400 records; binomial sd 0.0069, band +/- 3.6 sd: false failure 3e-4.

    The plug-in ``mean(y^2) - mean(y)^2`` is exact for data at one value and an upper bound
    otherwise (``mean(t^2) >= mean(t)^2``), so on bimodal data the interval only over-covers.
    """
    mech = ThreeOutputsMechanism(bounds=(0.0, 100.0), epsilon=1.5)
    assert 0.925 <= coverage(mech, np.full(400, 70.0), trials=1000, seed=8) <= 0.975
    bimodal = np.r_[np.full(200, -5.0), np.full(200, 100.0)]
    assert coverage(mech, bimodal, trials=1000, seed=9) >= 0.925


def test_dp_inequality_holds_on_intervals_of_draws() -> None:
    """lo vs hi, 200,000 draws each; false failure <= 1e-6."""
    mech = ThreeOutputsMechanism(bounds=(0.0, 100.0), epsilon=1.0)
    low, high = draws(mech, 0.0, 200_000, seed=3), draws(mech, 100.0, 200_000, seed=4)
    assert interval_violation(low, high, 1.0, risk=1e-6) <= 0.0
    assert interval_violation(low, high, 0.5, risk=1e-6) > 0.0


def test_outputs_are_three_values_and_replays_are_identical() -> None:
    mech = ThreeOutputsMechanism(bounds=(-20.0, 60.0), epsilon=2.0)
    values = np.linspace(-30.0, 70.0, 5000)
    first = mech.release(values, SeededSource(3))
    assert np.array_equal(first, mech.release(values, SeededSource(3)))
    c = mech.law.magnitude * mech.half
    assert set(first.tolist()) == {mech.middle - c, mech.middle, mech.middle + c}
    assert mech.gamma_lower_bound < mech.expected_error


def test_reports_beyond_the_double_range_are_refused() -> None:
    with pytest.raises(MechanismError, match="beyond the double range"):
        ThreeOutputsMechanism(bounds=(-1e300, 1e300), epsilon=2.0**-30)

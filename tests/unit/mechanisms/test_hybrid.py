"""Hybrid Mechanism: Duchi's coin, the PM share, realised privacy, unbiasedness, variance."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from privstream.errors import MechanismError
from privstream.kinds.real_ldp import MECHANISMS
from privstream.mechanisms.hybrid import EPS_STAR, HybridMechanism, duchi_coin, pm_share
from privstream.mechanisms.rng import KeyedSource
from privstream.testing import SeededSource

from tests.unit.mechanisms.test_piecewise import exact_mean
from tests.unit.mechanisms.unit_interval_checks import (
    coverage,
    draws,
    draws_at_the_law,
    exp_upper,
    interval_violation,
)

TWO_64 = 2**64


def duchi_variance(epsilon: float) -> float:
    """Duchi et al.'s worst case (t = 0): ``((e^eps + 1) / (e^eps - 1))^2``."""
    return ((math.exp(epsilon) + 1.0) / math.expm1(epsilon)) ** 2


def hm_variance(epsilon: float) -> float:
    """Wang et al. 2019, Lemma 4, for eps > eps*, written out from the paper."""
    a, e = math.exp(epsilon / 2.0), math.exp(epsilon)
    return (a + 3.0) / (3.0 * a * (a - 1.0)) + (e + 1.0) ** 2 / (a * (e - 1.0) ** 2)


def test_eps_star_is_where_the_two_rules_cross() -> None:
    """Below eps* Duchi alone has the lower worst case, above it the mixture (Wang et al.)."""
    assert 0.60 < EPS_STAR < 0.62
    assert hm_variance(EPS_STAR - 1e-6) > duchi_variance(EPS_STAR - 1e-6)
    assert hm_variance(EPS_STAR + 1e-6) < duchi_variance(EPS_STAR + 1e-6)
    assert pm_share(EPS_STAR) == 0.0
    assert pm_share(2.0) == pytest.approx(1.0 - math.exp(-1.0), rel=1e-15)


@pytest.mark.parametrize("epsilon", [2.0**-40, 1e-3, 0.3, 1.0, 4.0, 30.0, 700.0])
def test_coin_thresholds_keep_the_ratio_for_every_input(epsilon: float) -> None:
    coin = duchi_coin(epsilon)
    high = TWO_64 - coin.low
    # both outcomes, over the whole range of thresholds, within the exact bound
    assert Fraction(high, coin.low) <= exp_upper(epsilon)
    t = np.array([-1.0, -1.0 + 2.0**-52, -0.5, 0.0, 0.3, 1.0 - 2.0**-53, 1.0])
    thresholds = [int(v) for v in coin.threshold(t)]
    assert all(coin.low <= v <= high for v in thresholds)
    assert thresholds == sorted(thresholds)
    assert thresholds[0] == coin.low and high - thresholds[-1] <= 4 * 2.0**-53 * coin.width + 1
    mech = HybridMechanism(bounds=(0.0, 1.0), epsilon=epsilon)
    assert mech.realised_epsilon <= epsilon


def test_epsilons_below_the_thresholds_resolution_are_refused() -> None:
    with pytest.raises(MechanismError, match="too small for the"):
        HybridMechanism(bounds=(0.0, 1.0), epsilon=2.0**-45)


def exact_hybrid_mean(mech: HybridMechanism, t: float) -> Fraction:
    """``a E_PM + (1 - a) E_D`` of the implemented law (coin threshold as sampled)."""
    a = Fraction(mech.mix_threshold, TWO_64)
    up = Fraction(int(mech.coin.threshold(np.array([t]))[0]), TWO_64)
    b = Fraction(mech.coin.magnitude)
    duchi = b * up - b * (1 - up)
    pm = exact_mean(mech.grid, t) if a else Fraction(0)
    return a * pm + (1 - a) * duchi


@pytest.mark.parametrize("epsilon", [0.3, 2.0])
@pytest.mark.parametrize("t", [-1.0, -0.2, 0.0, 0.7071067811865476, 1.0])
def test_unbiased_up_to_the_stated_bound_on_the_exact_law(epsilon: float, t: float) -> None:
    mech = HybridMechanism(bounds=(-1.0, 1.0), epsilon=epsilon)
    assert abs(exact_hybrid_mean(mech, t) - Fraction(t)) <= Fraction(mech.unit_bias())


@pytest.mark.parametrize("epsilon", [0.3, 0.5, 1.0, 2.0, 4.0])
def test_worst_variance_is_the_papers_within_one_percent(epsilon: float) -> None:
    mech = HybridMechanism(bounds=(-1.0, 1.0), epsilon=epsilon)
    paper = hm_variance(epsilon) if epsilon > EPS_STAR else duchi_variance(epsilon)
    assert mech.unit_variance == pytest.approx(paper, rel=0.01)


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
@pytest.mark.parametrize("x", [0.0, 50.0, 100.0])
def test_variance_law_and_error_match_draws(epsilon: float, x: float) -> None:
    """200,000 draws; each check allows 5 standard errors: false failure below 1e-5 each."""
    mech = HybridMechanism(bounds=(0.0, 100.0), epsilon=epsilon)
    y, _ = draws_at_the_law(mech, x, seed=21)
    n = len(y)
    error = np.abs(y - x)
    assert error.mean() <= mech.expected_error + 5.0 * error.std() / math.sqrt(n)


def test_the_variance_is_flat_in_the_input_above_eps_star() -> None:
    """With a = 1 - e^{-eps/2} the t^2 terms cancel (Wang et al.): slope ~ 0."""
    mech = HybridMechanism(bounds=(0.0, 1.0), epsilon=2.0)
    law = mech.variance_law()
    slope, constant = law.square, law.constant
    assert abs(slope) < 1e-3 * constant


@pytest.mark.parametrize("epsilon", [0.4, 1.0])
def test_dp_inequality_holds_on_intervals(epsilon: float) -> None:
    """lo vs hi, 200,000 draws each; false failure <= 1e-6 per case."""
    mech = HybridMechanism(bounds=(0.0, 100.0), epsilon=epsilon)
    low, high = draws(mech, 0.0, 200_000, seed=3), draws(mech, 100.0, 200_000, seed=4)
    assert interval_violation(low, high, epsilon, risk=1e-6) <= 0.0


def test_the_interval_check_catches_a_mechanism_at_twice_the_epsilon() -> None:
    mech = HybridMechanism(bounds=(0.0, 100.0), epsilon=2.0)
    low, high = draws(mech, 0.0, 200_000, seed=3), draws(mech, 100.0, 200_000, seed=4)
    assert interval_violation(low, high, 1.0, risk=1e-6) > 0.0


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_interval_coverage_is_95_percent(epsilon: float) -> None:
    """1,000 intervals of 400 records; binomial sd 0.0069, band +/- 3.6 sd: false failure 3e-4."""
    mech = HybridMechanism(bounds=(0.0, 100.0), epsilon=epsilon)
    values = np.linspace(-10.0, 90.0, 400)
    assert 0.925 <= coverage(mech, values, trials=1000, seed=7) <= 0.975


def test_outputs_are_the_fixed_set_and_replays_are_identical() -> None:
    mech = HybridMechanism(bounds=(-20.0, 60.0), epsilon=1.0)
    values = np.linspace(-30.0, 70.0, 5000)
    first = mech.release(values, SeededSource(3))
    assert np.array_equal(first, mech.release(values, SeededSource(3)))
    b = mech.coin.magnitude
    reachable = np.concatenate([mech.grid.outputs(), [-b, b]])
    assert np.isin(first, mech.middle + mech.half * reachable).all()
    assert mech.gamma_lower_bound < mech.expected_error


@pytest.mark.parametrize("mechanism", ["piecewise", "hybrid", "duchi", "pm_sub"])
def test_keyed_source_replays_bit_for_bit_and_other_rows_differ(mechanism: str) -> None:
    """The worker's AES source: a row's release is a function of its seed and the field key."""
    mech = MECHANISMS[mechanism](bounds=(0.0, 100.0), epsilon=1.0)
    seeds = np.random.default_rng(0).integers(0, 256, size=(2000, 16), dtype=np.uint8)
    values = np.full(2000, 42.0)
    first = mech.release(values, KeyedSource(b"k" * 32, seeds))
    again = mech.release(values, KeyedSource(b"k" * 32, seeds))
    other = mech.release(values, KeyedSource(b"j" * 32, seeds))
    assert np.array_equal(first, again)
    # another key: independent draws, equal by chance only (HM: ~0.2 of rows, sd 0.01;
    # duchi: two outputs, ~0.5 of rows, sd 0.011)
    assert np.mean(first == other) < 0.75
    assert np.array_equal(
        first[:500], mech.release(values[:500], KeyedSource(b"k" * 32, seeds[:500]))
    )

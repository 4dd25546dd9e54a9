"""Laplace mechanism: calibration formulas, tightness, edge cases and distribution."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from privstream.errors import MechanismError
from privstream.mechanisms import LaplaceMechanism
from privstream.testing import SeededSource
from scipy import integrate, optimize, stats

from tests.support.configs import laplace_gamma, laplace_thesis_scale, laplace_tight_scale

CASES = [
    # (lo, hi, eps, delta)
    (1504.0, 4500.0, 0.1, 0.1),
    (1504.0, 4500.0, 1.0, 1e-6),
    (0.0, 1.0, 0.5, 0.0),
    (-20.0, 60.0, 2.0, 0.3),
    (-1.0, 1.0, 5.0, 0.9),
    (0.0, 240.0, 0.01, 0.0),
]


@pytest.mark.parametrize(("lo", "hi", "eps", "delta"), CASES)
def test_tight_scale_matches_formula(lo: float, hi: float, eps: float, delta: float) -> None:
    mech = LaplaceMechanism(bounds=(lo, hi), epsilon=eps, delta=delta)
    expected = laplace_tight_scale(hi - lo, eps, delta)
    assert mech.calibration == "tight"
    assert mech.continuous_scale == pytest.approx(expected, rel=1e-12)
    # the grid mechanism's effective scale and error stay within 1% of the continuous b
    assert mech.params()["scale"] == pytest.approx(expected, rel=1e-2)
    assert mech.expected_error == pytest.approx(expected, rel=1e-2)


@pytest.mark.parametrize(("lo", "hi", "eps", "delta"), CASES)
def test_thesis_scale_matches_formula(lo: float, hi: float, eps: float, delta: float) -> None:
    mech = LaplaceMechanism(bounds=(lo, hi), epsilon=eps, delta=delta, calibration="thesis")
    expected = laplace_thesis_scale(hi - lo, eps, delta)
    assert mech.continuous_scale == pytest.approx(expected, rel=1e-12)
    assert mech.scale == pytest.approx(expected, rel=1e-2)
    assert mech.expected_error == pytest.approx(expected, rel=1e-2)


@pytest.mark.parametrize(("lo", "hi", "eps", "delta"), CASES)
def test_gamma_lower_bound_matches_theorem_5_3(
    lo: float, hi: float, eps: float, delta: float
) -> None:
    for calibration in ("tight", "thesis"):
        mech = LaplaceMechanism(bounds=(lo, hi), epsilon=eps, delta=delta, calibration=calibration)
        plain = (1.0 - delta) * (hi - lo) / (2.0 * (1.0 + math.exp(eps)))
        assert mech.gamma_lower_bound == pytest.approx(plain, rel=1e-12)
        # the mechanism can never beat the lower bound
        assert mech.expected_error >= mech.gamma_lower_bound


@pytest.mark.parametrize(("eps", "delta"), [(0.1, 0.0), (1.0, 0.0), (3.0, 0.0)])
def test_calibrations_agree_at_delta_zero(eps: float, delta: float) -> None:
    tight = LaplaceMechanism(bounds=(0.0, 7.0), epsilon=eps, delta=delta)
    thesis = LaplaceMechanism(bounds=(0.0, 7.0), epsilon=eps, delta=delta, calibration="thesis")
    # calibrated at eps (1 - 2^-40) - 3.6e-12 (the sampler's slack), so a hair above 7/eps
    assert tight.scale == pytest.approx(7.0 / eps, rel=1e-10)
    assert thesis.scale == tight.scale


@pytest.mark.parametrize(("eps", "delta"), [(0.1, 0.1), (1.0, 1e-6), (2.0, 0.3)])
def test_tight_uses_strictly_less_noise_than_thesis_when_delta_positive(
    eps: float, delta: float
) -> None:
    tight = LaplaceMechanism(bounds=(0.0, 1.0), epsilon=eps, delta=delta)
    thesis = LaplaceMechanism(bounds=(0.0, 1.0), epsilon=eps, delta=delta, calibration="thesis")
    assert tight.scale < thesis.scale


def test_design_example_numbers() -> None:
    # DESIGN.md: diam 2996, eps 0.1, delta 0.1 gives 14589 (thesis) -> 9642 (tight)
    thesis = LaplaceMechanism(bounds=(1504, 4500), epsilon=0.1, delta=0.1, calibration="thesis")
    tight = LaplaceMechanism(bounds=(1504, 4500), epsilon=0.1, delta=0.1)
    assert thesis.diameter == 2996.0
    assert round(thesis.continuous_scale) == 14589
    assert round(tight.continuous_scale) == 9642
    assert thesis.scale == pytest.approx(14589, rel=1e-2)
    assert tight.scale == pytest.approx(9642, rel=1e-2)


@pytest.mark.parametrize("eps", [700.0, 800.0, 1e6])
def test_huge_epsilon_neither_overflows_nor_warns(eps: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mech = LaplaceMechanism(bounds=(0.0, 10.0), epsilon=eps, delta=1e-6)
        gamma = mech.gamma_lower_bound
        out = mech.release(np.array([3.0, 20.0, -5.0]), SeededSource(1))
    assert mech.continuous_scale == pytest.approx(laplace_tight_scale(10.0, eps, 1e-6), rel=1e-12)
    assert math.isfinite(gamma)
    assert gamma == pytest.approx(laplace_gamma(10.0, eps, 1e-6), rel=1e-9, abs=1e-320)
    assert np.all(np.isfinite(out))


def test_zero_diameter_releases_the_single_value_without_noise() -> None:
    mech = LaplaceMechanism(bounds=(5.0, 5.0), epsilon=1.0, delta=0.0)
    assert mech.scale == 0.0
    assert mech.expected_error == 0.0
    assert mech.gamma_lower_bound == 0.0
    out = mech.release(np.array([-1e300, 4.0, 5.0, 5.5, 1e300]), SeededSource(3))
    assert out.tolist() == [5.0] * 5


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bounds": (0.0, 1.0), "epsilon": 0.0},
        {"bounds": (0.0, 1.0), "epsilon": -1.0},
        {"bounds": (0.0, 1.0), "epsilon": math.inf},
        {"bounds": (0.0, 1.0), "epsilon": math.nan},
        {"bounds": (0.0, 1.0), "epsilon": 1.0, "delta": 1.0},
        {"bounds": (0.0, 1.0), "epsilon": 1.0, "delta": -0.1},
        {"bounds": (0.0, 1.0), "epsilon": 1.0, "delta": math.nan},
        {"bounds": (1.0, 0.0), "epsilon": 1.0},
        {"bounds": (0.0, math.inf), "epsilon": 1.0},
        {"bounds": (math.nan, 1.0), "epsilon": 1.0},
    ],
)
def test_invalid_parameters_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(MechanismError):
        LaplaceMechanism(**kwargs)  # type: ignore[arg-type]


# --- tightness: the hockey-stick divergence equals delta exactly ---------------------


def hockey_stick(diam: float, b: float, eps: float) -> float:
    """sup_S P(S) - e^eps Q(S) = integral of max(0, p - e^eps q), p = Lap(0,b), q = Lap(diam,b).

    Computed by numerical quadrature. The integrand is smooth except at 0, diam
    and the crossing point where p = e^eps q, found here by root finding on the
    log-density ratio (not taken from the code under test).
    """
    p = stats.laplace(loc=0.0, scale=b)
    q = stats.laplace(loc=diam, scale=b)

    def integrand(x: float) -> float:
        return max(0.0, float(p.pdf(x)) - math.exp(eps) * float(q.pdf(x)))

    def log_ratio_minus_eps(x: float) -> float:
        return float(p.logpdf(x) - q.logpdf(x)) - eps

    points = [0.0, diam]
    if log_ratio_minus_eps(0.0) > 0.0 > log_ratio_minus_eps(diam):
        points.append(optimize.brentq(log_ratio_minus_eps, 0.0, diam, xtol=1e-14 * diam))
    points.sort()
    opts = {"epsabs": 1e-14, "epsrel": 1e-13, "limit": 500}
    total, _ = integrate.quad(integrand, -np.inf, points[0], **opts)
    for left, right in itertools.pairwise(points):
        part, _ = integrate.quad(integrand, left, right, **opts)
        total += part
    tail, _ = integrate.quad(integrand, points[-1], np.inf, **opts)
    return total + tail


TIGHT_CASES = [
    (2996.0, 0.1, 0.1),
    (1.0, 1.0, 1e-6),
    (80.0, 2.0, 0.3),
    (10.0, 0.5, 0.05),
    (1.0, 1.0, 0.0),
]


@pytest.mark.parametrize(("diam", "eps", "delta"), TIGHT_CASES)
def test_tight_continuous_formula_is_exactly_eps_delta_dp(
    diam: float, eps: float, delta: float
) -> None:
    b = LaplaceMechanism(bounds=(0.0, diam), epsilon=eps, delta=delta).continuous_scale
    assert hockey_stick(diam, b, eps) == pytest.approx(delta, abs=1e-9)


@pytest.mark.parametrize(("diam", "eps", "delta"), TIGHT_CASES)
def test_less_noise_than_tight_breaks_the_guarantee(diam: float, eps: float, delta: float) -> None:
    b = LaplaceMechanism(bounds=(0.0, diam), epsilon=eps, delta=delta).continuous_scale
    assert hockey_stick(diam, 0.99 * b, eps) > delta + 1e-6


@pytest.mark.parametrize(("diam", "eps", "delta"), [c for c in TIGHT_CASES if c[2] > 0])
def test_thesis_calibration_is_valid_but_loose(diam: float, eps: float, delta: float) -> None:
    mech = LaplaceMechanism(bounds=(0.0, diam), epsilon=eps, delta=delta, calibration="thesis")
    assert hockey_stick(diam, mech.continuous_scale, eps) < delta - 1e-9


def discrete_profile(t: float, sensitivity: int, eps: float) -> float:
    """sum_z max(0, p(z) - e^eps p(z - Delta)) for p(z) = (1-a)/(1+a) a^|z|, by direct summation."""
    a = math.exp(-1.0 / t)
    reach = int(60 * t) + sensitivity + 10  # the tails beyond hold < e^-60 of the mass
    z = np.arange(-reach, reach + 1)
    pmf = (1 - a) / (1 + a) * np.exp(-np.abs(z) / t)
    shifted = (1 - a) / (1 + a) * np.exp(-np.abs(z - sensitivity) / t)
    return float(np.maximum(pmf - math.exp(eps) * shifted, 0.0).sum())


@pytest.mark.parametrize(("diam", "eps", "delta"), TIGHT_CASES)
def test_grid_noise_meets_the_exact_discrete_profile(diam: float, eps: float, delta: float) -> None:
    """The noise actually added is (eps, delta)-DP for the rounded sensitivity, and tight."""
    mech = LaplaceMechanism(bounds=(0.0, diam), epsilon=eps, delta=delta)
    g = mech.granularity
    assert math.log2(g).is_integer()
    assert mech.grid_sensitivity == round(diam / g) - round(0.0 / g)
    assert mech.noise is not None
    t = mech.noise.t
    assert discrete_profile(t, mech.grid_sensitivity, eps) <= delta + 1e-12
    if delta > 0:
        # tight up to the sampler's calibration margins (relative 1e-9, absolute 1e-15)
        assert discrete_profile(t, mech.grid_sensitivity, eps) == pytest.approx(delta, rel=1e-5)
        assert discrete_profile(0.99 * t, mech.grid_sensitivity, eps) > delta
    thesis = LaplaceMechanism(bounds=(0.0, diam), epsilon=eps, delta=delta, calibration="thesis")
    assert thesis.noise is not None
    assert discrete_profile(thesis.noise.t, thesis.grid_sensitivity, eps) <= delta + 1e-12


@pytest.mark.parametrize(("lo", "hi"), [(1504.0, 4500.0), (-20.0, 60.0), (0.1, 0.3)])
def test_neighbours_have_the_same_support_on_the_grid(lo: float, hi: float) -> None:
    """Mironov's attack needs d-dependent low bits: every output is a grid multiple."""
    mech = LaplaceMechanism(bounds=(lo, hi), epsilon=1.0, delta=1e-6)
    for value, seed in ((lo, 21), (hi, 22), ((lo + hi) / 3, 23)):
        out = mech.release(np.full(5000, value), SeededSource(seed))
        steps = out / mech.granularity
        assert np.array_equal(steps, np.round(steps))


# --- distribution of the released values -------------------------------------------

N_DRAWS = 20_000
KS_ALPHA = 1e-4  # false-failure probability per KS test (over the choice of seed)


@pytest.mark.parametrize(
    ("value", "clamped", "seed"),
    [
        (1504.0, 1504.0, 11),
        (3000.0, 3000.0, 12),
        (4500.0, 4500.0, 13),
        (9e9, 4500.0, 14),
        (-7.0, 1504.0, 15),
    ],
)
def test_noise_is_laplace_with_calibrated_scale(value: float, clamped: float, seed: int) -> None:
    mech = LaplaceMechanism(bounds=(1504.0, 4500.0), epsilon=1.0, delta=1e-6)
    b = laplace_tight_scale(2996.0, 1.0, 1e-6)
    out = mech.release(np.full(N_DRAWS, value), SeededSource(seed))
    noise = out - clamped
    result = stats.kstest(noise, stats.laplace(scale=b).cdf)
    assert result.pvalue > KS_ALPHA


def test_ks_detects_a_wrong_scale() -> None:
    # negative control: the same KS test rejects a Laplace of 1.2 times the scale
    mech = LaplaceMechanism(bounds=(0.0, 1.0), epsilon=1.0)
    noise = mech.release(np.full(N_DRAWS, 0.5), SeededSource(21)) - 0.5
    assert stats.kstest(noise, stats.laplace(scale=1.2).cdf).pvalue < KS_ALPHA


@pytest.mark.parametrize(("value", "bound"), [(1e12, 4500.0), (-1e12, 1504.0)])
def test_out_of_bounds_input_is_clamped_before_noise(value: float, bound: float) -> None:
    mech = LaplaceMechanism(bounds=(1504.0, 4500.0), epsilon=1.0)
    b = laplace_tight_scale(2996.0, 1.0, 0.0)
    out = mech.release(np.full(N_DRAWS, value), SeededSource(31))
    # sd of the mean of n Laplace(b) draws is b*sqrt(2/n); |z| > 4.5 has probability
    # < 1e-5 under the CLT (alpha ~ 1e-5 for this test)
    assert abs(out.mean() - bound) < 4.5 * b * math.sqrt(2.0 / N_DRAWS)


def test_release_keeps_shape_and_order_of_column() -> None:
    mech = LaplaceMechanism(bounds=(0.0, 1.0), epsilon=1000.0)  # b = 1e-3
    values = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    out = mech.release(values, SeededSource(5))
    assert out.shape == values.shape
    # noise of scale 1e-3 exceeds 0.05 with probability e^-50 per entry
    assert np.all(np.abs(out - values) < 0.05)


def test_release_of_empty_column() -> None:
    mech = LaplaceMechanism(bounds=(0.0, 1.0), epsilon=1.0)
    assert mech.release(np.empty(0), SeededSource(1)).shape == (0,)


class _ExtremeWordSource:
    """A noise source whose every word is the same extreme value."""

    def __init__(self, word: int) -> None:
        self.word = word

    def words(self, n: int, k: int) -> np.ndarray:
        return np.full((n, k), self.word, dtype=np.uint64)

    def more_words(self, rows: np.ndarray, start: int, k: int) -> np.ndarray:
        return self.words(len(rows), k)


def test_a_source_stuck_on_the_top_word_fails_instead_of_looping() -> None:
    # 2^64 - 1 extends every head round: a real source does that 4096 times in a row
    # with probability e^-16384; this one always does, and the release refuses
    mech = LaplaceMechanism(bounds=(0.0, 1.0), epsilon=1.0)
    with pytest.raises(MechanismError, match="not uniform"):
        mech.release(np.array([0.5]), _ExtremeWordSource(2**64 - 1))


@pytest.mark.parametrize("word", [0, 2**63])
def test_extreme_words_still_give_finite_grid_output(word: int) -> None:
    mech = LaplaceMechanism(bounds=(0.0, 1.0), epsilon=1.0)
    out = mech.release(np.array([0.5]), _ExtremeWordSource(word))
    assert np.all(np.isfinite(out)), out
    assert (out / mech.granularity).tolist() == np.round(out / mech.granularity).tolist()

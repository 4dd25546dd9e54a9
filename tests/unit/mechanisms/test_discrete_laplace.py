"""Discrete Laplace noise: CDF, moments, exact privacy profile, calibration, sampler.

Every expected value is computed here from the pmf alone,
``p(z) = (1 - a)/(1 + a) a^|z|`` with ``a = e^(-1/t)``, by direct summation
over a support wide enough that the cut tails weigh less than ``e^-40``.
The privacy profile is the hockey-stick divergence between ``p`` and its
shift by the sensitivity ``D``::

    delta(eps) = sum_z max(0, p(z) - e^eps p(z - D))
               = sum_z p(z) max(0, 1 - exp(eps - L(z))),  L(z) = (|z - D| - |z|)/t

(the second form is the first divided and multiplied by ``p(z)``; it never
forms ``e^eps`` on its own, so eps = 800 is fine in doubles).
"""

from __future__ import annotations

import itertools
import math
import warnings
from decimal import Decimal, localcontext

import numpy as np
import pytest
from privstream.errors import MechanismError
from privstream.mechanisms.discrete_laplace import DiscreteLaplace, calibrate
from privstream.testing import SeededSource
from scipy import stats

# --- the reference, from the pmf -----------------------------------------------------


def pmf(t: float, z: int) -> float:
    a = math.exp(-1.0 / t)
    return (1.0 - a) / (1.0 + a) * math.exp(-abs(z) / t)


def span(t: float) -> int:
    """Half-width of the summed support: mass beyond it is below e^-40."""
    return math.ceil(40.0 * t) + 40


def direct_delta(t: float, sensitivity: int, eps: float) -> float:
    terms = []
    for z in range(-span(t), sensitivity + span(t)):
        loss = (abs(z - sensitivity) - abs(z)) / t
        if loss > eps:
            terms.append(pmf(t, z) * -math.expm1(eps - loss))
    return math.fsum(terms)


SCALES = [0.3, 1.0, 2.5, 10.0, 50.0]


# --- distribution --------------------------------------------------------------------


@pytest.mark.parametrize("t", SCALES)
def test_pmf_reference_is_a_distribution(t: float) -> None:
    # guards the reference itself: total mass 1 over the summed support
    total = math.fsum(pmf(t, z) for z in range(-span(t), span(t) + 1))
    assert total == pytest.approx(1.0, abs=1e-13)


@pytest.mark.parametrize("t", SCALES)
def test_cdf_matches_summed_pmf(t: float) -> None:
    noise = DiscreteLaplace(t)
    reach = math.ceil(5 * t) + 3
    left = -span(t)
    for z in range(-reach, reach + 1):
        summed = math.fsum(pmf(t, j) for j in range(left, z + 1))
        assert noise.cdf(z) == pytest.approx(summed, rel=1e-11, abs=1e-15), z


@pytest.mark.parametrize("t", SCALES)
def test_moments_match_summed_pmf(t: float) -> None:
    noise = DiscreteLaplace(t)
    support = range(-span(t), span(t) + 1)
    mean_abs = math.fsum(abs(z) * pmf(t, z) for z in support)
    variance = math.fsum(z * z * pmf(t, z) for z in support)
    assert noise.mean_abs == pytest.approx(mean_abs, rel=1e-11)
    assert noise.variance == pytest.approx(variance, rel=1e-11)
    assert noise.p_zero == pytest.approx(pmf(t, 0), rel=1e-14)
    assert noise.a == pytest.approx(math.exp(-1.0 / t), rel=1e-15)


def decimal_moments(t: float) -> tuple[float, float, float]:
    """E|Z| = 2a/(1 - a^2), Var Z = 2a/(1 - a)^2, P(0) = (1-a)/(1+a) at 60 digits."""
    with localcontext() as ctx:
        ctx.prec = 60
        a = (Decimal(-1) / Decimal(t)).exp()
        return (
            float(2 * a / ((1 - a) * (1 + a))),
            float(2 * a / (1 - a) ** 2),
            float((1 - a) / (1 + a)),
        )


@pytest.mark.parametrize("t", [1e3, 1e6, 1e9])
def test_moments_match_high_precision_closed_form(t: float) -> None:
    noise = DiscreteLaplace(t)
    mean_abs, variance, p_zero = decimal_moments(t)
    # 1 - e^(-1/t) in doubles costs about t * 1e-16 relative
    assert noise.mean_abs == pytest.approx(mean_abs, rel=1e-6)
    assert noise.variance == pytest.approx(variance, rel=1e-6)
    assert noise.p_zero == pytest.approx(p_zero, rel=1e-6)


def test_moments_are_accurate_for_large_scales() -> None:
    t = 2.0**40  # the largest scale the sampler accepts
    noise = DiscreteLaplace(t)
    mean_abs, variance, p_zero = decimal_moments(t)
    assert noise.mean_abs == pytest.approx(mean_abs, rel=1e-6)
    assert noise.variance == pytest.approx(variance, rel=1e-6)
    assert noise.p_zero == pytest.approx(p_zero, rel=1e-6)


@pytest.mark.parametrize("t", [2.0**40 * 1.0001, 1e17, 0.0, -1.0])
def test_scales_the_sampler_cannot_serve_are_refused(t: float) -> None:
    # above 2**40 the noise sums of rare long extensions would approach int64
    with pytest.raises(MechanismError, match="narrow the bounds or raise epsilon"):
        DiscreteLaplace(t)


# --- exact privacy profile -----------------------------------------------------------

PROFILE_CASES = [
    (1.0, 1, 0.5),
    (2.5, 3, 0.7),
    (10.0, 7, 0.3),
    (0.7, 5, 2.0),
    (3.0, 2, 0.66),
    (4.0, 4, 0.999),
    (50.0, 1, 0.01),
    (1.0, 1, 0.999999),
    (0.25, 30, 100.0),
    (1.0, 805, 800.0),  # eps0 = 805 > 800: a non-trivial profile at eps = 800
]


@pytest.mark.parametrize(("t", "sensitivity", "eps"), PROFILE_CASES)
def test_delta_matches_direct_summation(t: float, sensitivity: int, eps: float) -> None:
    expected = direct_delta(t, sensitivity, eps)
    assert expected > 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = DiscreteLaplace(t).delta(eps, sensitivity)
    # the code subtracts two CDF values: allow its cancellation (a few 1e-16 absolute)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize(
    ("t", "sensitivity", "eps"),
    [
        (1.0, 1, 1.0),  # eps = eps0 = D/t exactly
        (2.0, 3, 1.5),  # eps = eps0
        (2.0, 3, 1.6),
        (0.5, 2, 800.0),
        (1e-3, 1, 1000.0),
        (10.0, 7, 800.0),
    ],
)
def test_delta_is_zero_from_eps0_on(t: float, sensitivity: int, eps: float) -> None:
    assert eps >= sensitivity / t
    assert direct_delta(t, sensitivity, eps) == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert DiscreteLaplace(t).delta(eps, sensitivity) == 0.0


def test_delta_at_eps_800_with_tiny_scale_has_no_overflow() -> None:
    # t = 1e-3, D = 1: eps0 = 1000, a = e^-1000 underflows to 0; the whole mass sits at
    # z = 0, whose loss is 1000 > 800, so delta = 1 - e^-200 (1.0 in doubles)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = DiscreteLaplace(1e-3).delta(800.0, 1)
    assert got == pytest.approx(-math.expm1(-200.0), rel=1e-15)
    assert got == pytest.approx(direct_delta(1e-3, 1, 800.0), rel=1e-15)


def test_delta_falls_as_noise_grows() -> None:
    deltas = [DiscreteLaplace(t).delta(0.5, 3) for t in (1.0, 2.0, 3.0, 4.0, 5.0, 5.9)]
    assert all(x > y for x, y in itertools.pairwise(deltas))


# --- calibration ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("eps", "sensitivity"), [(1.0, 1), (0.3, 7), (0.1, 1000), (2.0, 3), (800.0, 1)]
)
def test_pure_calibration_is_sensitivity_over_epsilon(eps: float, sensitivity: int) -> None:
    noise = calibrate(eps, 0.0, sensitivity)
    # at eps (1 - 2^-40) - 4.0001 * 2^-40: the sampler's slack, a hair more noise
    assert sensitivity / eps < noise.t <= sensitivity / eps * (1 + 1e-10)
    assert noise.delta(eps, sensitivity) == 0.0
    assert noise.certified_delta(eps, sensitivity) == 0.0


@pytest.mark.parametrize(
    ("eps", "delta", "sensitivity"),
    [
        (1.0, 1e-3, 1),
        (0.5, 1e-3, 5),
        (0.1, 1e-3, 3),
        (1.0, 1e-5, 1),
        (0.3, 1e-5, 7),
        (1.0, 1e-5, 1000),
        (5.0, 1e-5, 2),
        (2.0, 0.3, 10),
    ],
)
def test_calibration_meets_delta_tightly(eps: float, delta: float, sensitivity: int) -> None:
    t = calibrate(eps, delta, sensitivity).t
    profile = direct_delta(t, sensitivity, eps)
    # <= delta (slack 1e-12 relative for the rounding of the reference sum itself);
    # tight up to the sampler's margins (eps - 8e-12, delta (1 - 1e-9) - 1e-15), which can
    # move the profile by more where it jumps with z* (small t)
    assert profile <= delta * (1.0 + 1e-12)
    assert profile >= delta * (1.0 - 1e-5)
    assert direct_delta(0.99 * t, sensitivity, eps) > delta
    assert t < sensitivity / eps  # less noise than pure DP needs


@pytest.mark.parametrize(
    ("eps", "delta", "sensitivity"),
    [(0.5, 1e-10, 1), (0.5, 1e-10, 5), (0.1, 1e-12, 3), (5.0, 1e-8, 1), (0.01, 1e-9, 1)],
)
def test_calibration_with_tiny_delta_is_the_least_noise(
    eps: float, delta: float, sensitivity: int
) -> None:
    # the bisection stops at 1e-12 relative in t, so for tiny delta the profile can sit a
    # little below delta; t itself must still be minimal to 1e-9 relative
    t = calibrate(eps, delta, sensitivity).t
    assert direct_delta(t, sensitivity, eps) <= delta * (1.0 + 1e-12)
    # minimal up to the sampler's calibration margins (absolute 1e-15 in delta)
    assert direct_delta(t * (1.0 - 1e-6), sensitivity, eps) > delta
    assert t <= sensitivity / eps * (1 + 1e-10)


# --- sampler -------------------------------------------------------------------------


def binned_counts(z: np.ndarray, t: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Observed and expected counts on -K..K with both tails folded into end bins."""
    a = math.exp(-1.0 / t)
    k = 0
    while n * pmf(t, k + 1) >= 5.0:
        k += 1
    centre = np.arange(-k, k + 1)
    # P(Z > k) = sum_{j > k} (1-a)/(1+a) a^j = a^(k+1)/(1+a), and the same for Z < -k
    tail = a ** (k + 1) / (1.0 + a)
    expected = np.array([tail, *(pmf(t, int(j)) for j in centre), tail]) * n
    observed = np.array(
        [np.sum(z < -k), *(np.sum(z == j) for j in centre), np.sum(z > k)], dtype=float
    )
    return observed, expected


@pytest.mark.parametrize(("t", "seed"), [(0.4, 101), (2.0, 102), (7.5, 103)])
def test_sampler_follows_the_pmf(t: float, seed: int) -> None:
    n = 50_000
    z = DiscreteLaplace(t).sample(SeededSource(seed), n)
    assert z.shape == (n,)
    assert z.dtype == np.int64
    observed, expected = binned_counts(z, t, n)
    assert observed.sum() == n
    # chi-square goodness of fit, alpha = 1e-4: false-failure probability 1e-4 per seed
    assert stats.chisquare(observed, expected * n / expected.sum()).pvalue > 1e-4


def test_chi_square_detects_a_ten_percent_scale_error() -> None:
    # power check of the test above: samples at t = 2.2 against the pmf at t = 2.0
    n = 50_000
    z = DiscreteLaplace(2.2).sample(SeededSource(104), n)
    observed, expected = binned_counts(z, 2.0, n)
    assert stats.chisquare(observed, expected * n / expected.sum()).pvalue < 1e-6

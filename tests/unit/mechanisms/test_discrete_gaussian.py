"""Discrete Gaussian: the exact table, the sampler, and the privacy profiles.

Reference values are computed here independently of the code under test:
plain numpy sums over a wide window, Python integers, 50-digit ``decimal``
arithmetic and scipy. Statistical tests use fixed seeds; each states the
probability that it would fail for a random seed although the code is right.
"""

from __future__ import annotations

import bisect
import math
from decimal import Decimal, getcontext
from itertools import accumulate

import numpy as np
import pytest
from privstream.errors import MechanismError
from privstream.mechanisms.discrete_gaussian import (
    MAX_EXACT_SIGMA,
    MAX_TABLE_SIGMA,
    PMF_RELATIVE_ERROR,
    DiscreteGaussianSampler,
    calibrate_discrete_gaussian,
    concentrated_delta,
    discrete_gaussian_delta,
    sampler_for,
)
from privstream.testing import SeededSource
from scipy import optimize, stats

ONE = 1 << 128
MASK64 = (1 << 64) - 1


def ideal_pmf(sigma: float, reach: int) -> tuple[np.ndarray, np.ndarray]:
    """z = -reach..reach and exp(-z^2/(2 sigma^2)) normalised over that window."""
    z = np.arange(-reach, reach + 1)
    w = np.exp(-(z.astype(float) ** 2) / (2.0 * sigma * sigma))
    return z, w / w.sum()


def brute_profile(pmf: np.ndarray, shift: int, eps: float) -> float:
    """sum_z max(0, p(z) - e^eps p(z - shift)) for a pmf on consecutive integers."""
    padded = np.concatenate([pmf, np.zeros(shift)])
    shifted = np.concatenate([np.zeros(shift), pmf])
    return float(np.maximum(padded - math.exp(eps) * shifted, 0.0).sum())


def words_for(u: int) -> np.ndarray:
    """The two words whose 128-bit uniform is u."""
    return np.array([[u >> 64, u & MASK64]], dtype=np.uint64)


# --- the table -----------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [0.4, 1.0, 3.7, 40.2, 1500.5])
def test_table_is_an_exact_symmetric_log_concave_pmf(sigma: float) -> None:
    sampler = sampler_for(sigma)
    w = sampler.weights()
    t = sampler.support
    assert len(w) == 2 * t + 1
    assert sum(w) == ONE  # exact: the sampler's pmf sums to one
    assert w == w[::-1]
    assert all(x > 0 for x in w)
    assert all(w[i] * w[i] >= w[i - 1] * w[i + 1] for i in range(1, len(w) - 1))
    # close to the ideal pmf everywhere
    z, p = ideal_pmf(sigma, t + 60 * math.ceil(sigma))
    ideal = p[np.abs(z) <= t]
    assert np.max(np.abs(sampler.pmf - ideal)) < 1e-15
    # the cut tail is negligible: support reaches at least 10.5 sigma (or the whole mass)
    assert t >= min(10.5 * sigma, 12 * sigma)


@pytest.mark.parametrize("sigma", [0.4, 3.7, 1500.5])
def test_reference_pmf_is_accurate_to_far_better_than_the_assumed_bound(sigma: float) -> None:
    """p_f(z) against 50-digit arithmetic (normaliser by Poisson summation), at the table's
    far end too: the a-priori bound 2^-40 of the vector accounting has a 20x margin."""
    getcontext().prec = 50
    pi = Decimal("3.14159265358979323846264338327950288419716939937510")
    s = Decimal(repr(sigma))
    series = 1 + 2 * sum((-2 * pi * pi * s * s * k * k).exp() for k in range(1, 8))
    normaliser = s * (2 * pi).sqrt() * series
    sampler = sampler_for(sigma)
    zs = sorted({0, 1, 2, sampler.support // 3, sampler.support // 2, sampler.support})
    for z in zs:
        exact = (-(Decimal(z) ** 2) / (2 * s * s)).exp() / normaliser
        approx = Decimal(float(sampler.reference_pmf[z]))
        # observed ~60 ulps at z = T0 (exp of an argument near 100 carries its rounding)
        assert abs(approx / exact - 1) < Decimal(PMF_RELATIVE_ERROR) / 20


# --- the sampler ---------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [0.4, 3.7, 1500.5])
def test_sampler_inverts_the_exact_cdf(sigma: float) -> None:
    """Z = -T + #{j : C_j <= u}: checked at and next to every kind of threshold."""
    sampler = sampler_for(sigma)
    cdf = list(accumulate(sampler.weights()))[:-1]
    t = sampler.support
    picks = sorted({0, 1, len(cdf) // 3, len(cdf) // 2, len(cdf) - 1})
    probes = [0, ONE - 1, 1 << 64, (1 << 64) - 1]
    for j in picks:
        probes += [cdf[j] - 1, cdf[j], cdf[j] + 1]
    for u in probes:
        expected = bisect.bisect_right(cdf, u) - t
        assert int(sampler.sample(words_for(u))[0]) == expected, u


@pytest.mark.parametrize("sigma", [0.4, 37.0, 1500.5, 20_000.0])
def test_guide_table_lookup_is_the_exact_inversion_everywhere(sigma: float) -> None:
    """Every threshold and its neighbours, shared high words, and random words: bisect's answer.

    The guide table decides most values from the high word alone; the rows it
    leaves (dense buckets, equal high words) go to the 128-bit search. Both
    branches are hit here (dense buckets exist in the tails at every sigma).
    """
    sampler = sampler_for(sigma)
    cdf = list(accumulate(sampler.weights()))[:-1]
    rng = np.random.default_rng(12)
    picks = rng.choice(len(cdf), size=min(len(cdf), 3_000), replace=False).tolist()
    probes = [c + d for j in picks for c in (cdf[j],) for d in (-1, 0, 1)]
    # a threshold's high word with another low word: the tie branch
    probes += [
        (cdf[j] >> 64 << 64) | int(lo)
        for j in picks[:500]
        for lo in rng.integers(0, 2**64, 2, dtype=np.uint64)
    ]
    randoms = rng.integers(0, 2**64, size=(20_000, 2), dtype=np.uint64)
    probes += [(int(hi) << 64) | int(lo) for hi, lo in randoms.tolist()]
    probes = [min(max(u, 0), ONE - 1) for u in probes]
    words = np.array([[u >> 64, u & MASK64] for u in probes], dtype=np.uint64)
    expected = [bisect.bisect_right(cdf, u) - sampler.support for u in probes]
    assert sampler.sample(words).tolist() == expected


def test_extreme_words_hit_the_ends_of_the_support() -> None:
    sampler = sampler_for(3.7)
    words = np.array([[0, 0], [MASK64, MASK64]], dtype=np.uint64)
    assert sampler.sample(words).tolist() == [-sampler.support, sampler.support]


def test_sampler_keeps_leading_shape() -> None:
    sampler = sampler_for(3.7)
    words = SeededSource(3).words(6, 8).reshape(6, 4, 2)
    assert sampler.sample(words).shape == (6, 4)


CHI2_ALPHA = 1e-6  # false-failure probability of one chi-square test over the seed


def _chi_square_pvalue(
    sample: np.ndarray, sampler: DiscreteGaussianSampler, pmf: np.ndarray
) -> float:
    counts = np.bincount(sample + sampler.support, minlength=len(pmf))
    expected = pmf * len(sample)
    big = expected >= 20  # pool the tails so every cell expects >= 20
    left = np.cumsum(~big) == np.arange(1, len(pmf) + 1)
    right = ~big & ~left
    obs = np.concatenate([counts[big], [counts[left].sum(), counts[right].sum()]])
    exp = np.concatenate([expected[big], [expected[left].sum(), expected[right].sum()]])
    stat = float(np.sum((obs - exp) ** 2 / exp))
    return float(stats.chi2.sf(stat, df=len(obs) - 1))


def test_sampler_distribution_matches_the_pmf_chi_square() -> None:
    sampler = sampler_for(2.5)
    _, p = ideal_pmf(2.5, sampler.support)
    sample = sampler.sample(SeededSource(7).words(200_000, 2))
    assert _chi_square_pvalue(sample, sampler, p) > CHI2_ALPHA
    # negative control: the same test rejects the pmf of sigma = 2.6
    _, wrong = ideal_pmf(2.6, sampler.support)
    assert _chi_square_pvalue(sample, sampler, wrong / wrong.sum()) < CHI2_ALPHA


def test_large_sigma_sampler_has_the_right_moments() -> None:
    sampler = sampler_for(1500.5)
    n = 200_000
    sample = sampler.sample(SeededSource(8).words(n, 2)).astype(float)
    var = sampler.variance
    assert var == pytest.approx(1500.5**2, rel=1e-9)  # the DG variance equals sigma^2 here
    # CLT: |mean| < 4.5 sd and |sample var - var| < 4.5 sd(var) (sd ~ var sqrt(2/n)):
    # false-failure probability < 2e-5
    assert abs(sample.mean()) < 4.5 * math.sqrt(var / n)
    assert abs(sample.var() - var) < 4.5 * var * math.sqrt(2.0 / n)


# --- privacy profiles ----------------------------------------------------------------

PROFILE_CASES = [
    # (eps, sigma, Delta)
    (1.0, 3.7, 1),
    (0.1, 3.7, 2),
    (5.0, 2.0, 3),
    (1.0, 40.2, 10),
    (0.01, 40.2, 1),
    (3.0, 1200.0, 400),
]


@pytest.mark.parametrize(("eps", "sigma", "shift"), PROFILE_CASES)
def test_ideal_profile_matches_brute_force(eps: float, sigma: float, shift: int) -> None:
    _, p = ideal_pmf(sigma, math.ceil(40 * sigma) + shift)
    expected = brute_profile(p, shift, eps)
    got = discrete_gaussian_delta(eps, sigma, shift)
    assert got >= expected * (1 - 1e-12)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize(("eps", "sigma", "shift"), PROFILE_CASES)
def test_ideal_profile_matches_cks_theorem_7(eps: float, sigma: float, shift: int) -> None:
    """delta = P[X >= lo] - e^eps P[X >= hi], lo/hi = floor(eps s^2/D -/+ D/2) + 1."""
    z, p = ideal_pmf(sigma, math.ceil(40 * sigma) + shift)
    lo = math.floor(eps * sigma**2 / shift - shift / 2) + 1
    hi = math.floor(eps * sigma**2 / shift + shift / 2) + 1
    expected = p[z >= lo].sum() - math.exp(eps) * p[z >= hi].sum()
    assert discrete_gaussian_delta(eps, sigma, shift) == pytest.approx(expected, rel=1e-8)


@pytest.mark.parametrize(("eps", "sigma", "shift"), [(1.0, 3.7, 3), (0.3, 40.2, 12), (4.0, 2.0, 5)])
def test_sampler_profile_covers_every_smaller_shift(eps: float, sigma: float, shift: int) -> None:
    sampler = sampler_for(sigma)
    pmf = np.array([float(w) for w in sampler.weights()]) / 2.0**128
    worst = max(brute_profile(pmf, s, eps) for s in range(1, shift + 1))
    got = sampler.delta(eps, shift)
    assert got >= worst
    assert got == pytest.approx(brute_profile(pmf, shift, eps), rel=1e-9)
    # and the table's profile is the ideal one to ~1e-12
    assert got == pytest.approx(discrete_gaussian_delta(eps, sigma, shift), rel=1e-9)


@pytest.mark.parametrize(
    ("eps", "delta", "shift"), [(1.0, 1e-5, 1), (1.0, 1e-5, 300), (0.1, 1e-8, 20), (8.0, 1e-3, 500)]
)
def test_calibration_is_safe_and_tight(eps: float, delta: float, shift: int) -> None:
    sigma = calibrate_discrete_gaussian(eps, delta, shift)
    achieved = discrete_gaussian_delta(eps, sigma, shift)
    assert achieved <= delta
    assert achieved >= delta * (1 - 1e-9)
    assert discrete_gaussian_delta(eps, sigma * (1 - 1e-6), shift) > delta


def _zcdp_reference(rho: float, eps: float) -> float:
    """inf over alpha > 1 of exp((a-1)(a rho - eps)) (1 - 1/a)^a / (a - 1), by scipy."""

    def log_delta(log_am1: float) -> float:
        a = 1.0 + math.exp(log_am1)
        return (a - 1) * (a * rho - eps) + a * math.log1p(-1 / a) - math.log(a - 1)

    best = optimize.minimize_scalar(
        log_delta, bounds=(-30.0, 15.0), method="bounded", options={"xatol": 1e-12}
    )
    return min(1.0, math.exp(float(best.fun)))


@pytest.mark.parametrize(("rho", "eps"), [(0.025, 1.0), (0.5, 3.0), (1e-4, 0.1), (2.0, 1.0)])
def test_concentrated_delta_is_the_optimal_conversion(rho: float, eps: float) -> None:
    got = concentrated_delta(rho, eps)
    assert got == pytest.approx(_zcdp_reference(rho, eps), rel=1e-6)
    # and it upper-bounds the exact Gaussian profile at sigma = 1/sqrt(2 rho), Delta = 1
    sigma = 1.0 / math.sqrt(2.0 * rho)
    exact = stats.norm.cdf(0.5 / sigma - eps * sigma) - math.exp(eps) * stats.norm.cdf(
        -0.5 / sigma - eps * sigma
    )
    assert got >= exact


def test_huge_sigma_falls_back_to_the_zcdp_bound() -> None:
    sigma = 2.0 * MAX_EXACT_SIGMA
    shift = int(sigma / 3)
    assert discrete_gaussian_delta(1.0, sigma, shift) == concentrated_delta(
        shift**2 / (2 * sigma**2), 1.0
    )


@pytest.mark.parametrize(
    ("eps", "sens", "k"), [(1.0, 300.0, 1), (1.0, 300.0, 10), (0.5, 900.5, 50)]
)
def test_vector_profile_is_the_zcdp_bound_plus_tiny_corrections(
    eps: float, sens: float, k: int
) -> None:
    sampler = sampler_for(1500.5)
    ideal = concentrated_delta(sens**2 / (2 * 1500.5**2), eps)
    got = sampler.vector_delta(eps, sens, k)
    assert got >= ideal
    assert got == pytest.approx(ideal, rel=1e-4)
    assert sampler.vector_delta(eps, sens, k + 10) >= got


def test_zero_sensitivity_costs_nothing() -> None:
    assert discrete_gaussian_delta(1.0, 3.0, 0) == 0.0
    assert sampler_for(3.0).delta(1.0, 0) == 0.0
    assert sampler_for(3.0).vector_delta(1.0, 0.0, 4) == 0.0


@pytest.mark.parametrize("sigma", [0.0, -1.0, math.inf, math.nan, 2 * MAX_TABLE_SIGMA])
def test_invalid_or_oversized_sigma_is_refused(sigma: float) -> None:
    with pytest.raises(MechanismError):
        DiscreteGaussianSampler(sigma)

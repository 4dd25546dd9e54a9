"""Unary encoding of sets: calibration, the exact DP inequality, bit flips, the estimator.

Expected values are written here from the formulas (Wang et al. 2017 for OUE,
RAPPOR for the symmetric variant, DESIGN.md section 1 for the lower bounds),
independently of the module under test. Statistical tests use fixed seeds
(``SeededSource``); each states its false-failure probability.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from privstream.errors import MechanismError
from privstream.mechanisms.unary_encoding import (
    UnaryEncoding,
    estimate_item_frequencies,
    set_epsilon,
    unary_probabilities,
)
from privstream.testing import SeededSource
from scipy import stats

from tests.support.configs import CountingSource


def universe(d: int) -> list[str]:
    return [f"hobby{j}" for j in range(d)]


def ref_variance(n: int, f: float, p: float, q: float) -> float:
    return (f * p * (1 - p) + (1 - f) * q * (1 - q)) / (n * (p - q) ** 2)


# --- calibration ---------------------------------------------------------------------------


@pytest.mark.parametrize(("d", "k"), [(2, 1), (10, 1), (20, 3), (6, 3), (100, 10)])
@pytest.mark.parametrize("eps", [0.1, 1.0, math.log(3.0), 4.0])
def test_calibration_when_universe_holds_two_disjoint_sets(d: int, k: int, eps: float) -> None:
    # d >= 2k: OUE spends eps/k per item changed, q = 1/(e^(eps/k) + 1), p = 1/2;
    # symmetric spends eps/(2k) per bit, p = e^(eps/2k)/(e^(eps/2k) + 1), q = 1 - p
    oue = UnaryEncoding(universe=universe(d), max_items=k, epsilon=eps)
    assert oue.variant == "optimized"
    assert oue.p == 0.5
    assert oue.q == pytest.approx(1.0 / (math.exp(eps / k) + 1.0), rel=1e-12)
    assert oue.item_epsilon == pytest.approx(eps / k, rel=1e-12)
    sym = UnaryEncoding(universe=universe(d), max_items=k, epsilon=eps, variant="symmetric")
    c = eps / (2 * k)
    assert sym.p == pytest.approx(math.exp(c) / (math.exp(c) + 1.0), rel=1e-12)
    assert sym.q == pytest.approx(1.0 / (math.exp(c) + 1.0), rel=1e-12)
    assert sym.item_epsilon == pytest.approx(eps / k, rel=1e-12)
    for mech in (oue, sym):
        assert mech.delta == 0.0
        assert mech.realized_epsilon <= eps * (1 + 1e-12)
        assert mech.realized_epsilon == pytest.approx(eps, rel=1e-9)


def test_single_item_sets_are_wang_et_al_oue() -> None:
    # k = 1: exactly the OUE of Wang et al. at eps, and symmetric is RAPPOR at eps
    eps = 1.5
    oue = UnaryEncoding(universe=universe(5), max_items=1, epsilon=eps)
    assert oue.q == pytest.approx(1.0 / (math.exp(eps) + 1.0), rel=1e-12)
    sym = UnaryEncoding(universe=universe(5), max_items=1, epsilon=eps, variant="symmetric")
    assert sym.p == pytest.approx(math.exp(eps / 2) / (math.exp(eps / 2) + 1.0), rel=1e-12)


def _log_likelihoods(sets: list[frozenset[int]], d: int, p: float, q: float) -> np.ndarray:
    """Row per set, column per output vector y in {0,1}^d: ln P(y | set), by brute force."""
    outputs = list(itertools.product((0, 1), repeat=d))
    table = np.empty((len(sets), len(outputs)))
    for r, s in enumerate(sets):
        for c, y in enumerate(outputs):
            total = 0.0
            for j in range(d):
                one = p if j in s else q
                total += math.log(one if y[j] else 1.0 - one)
            table[r, c] = total
    return table


def _admissible_sets(d: int, k: int) -> list[frozenset[int]]:
    return [
        frozenset(c)
        for size in range(min(k, d) + 1)
        for c in itertools.combinations(range(d), size)
    ]


# Exact (not sampled): for every output singleton {y} and every pair of admissible sets
# A, B, ln P(y|A) - ln P(y|B) <= eps. Pure DP on all singletons gives it for every output
# set (sum over y). The maximum equals eps: the calibration wastes nothing.
@pytest.mark.parametrize(
    ("d", "k"), [(2, 1), (4, 1), (4, 2), (5, 2), (3, 2), (5, 3), (3, 3), (2, 5), (6, 2)]
)
@pytest.mark.parametrize("variant", ["optimized", "symmetric"])
@pytest.mark.parametrize("eps", [0.3, 1.0, 3.0])
def test_dp_inequality_holds_exactly_and_tightly(d: int, k: int, variant: str, eps: float) -> None:
    mech = UnaryEncoding(universe=universe(d), max_items=k, epsilon=eps, variant=variant)  # type: ignore[arg-type]
    table = _log_likelihoods(_admissible_sets(d, k), d, mech.p, mech.q)
    worst = float((table.max(axis=0) - table.min(axis=0)).max())
    assert worst <= eps + 1e-9
    assert worst == pytest.approx(eps, abs=1e-9)
    # the integer thresholds actually used are no worse
    assert mech.realized_epsilon <= eps * (1 + 1e-12)


def test_negative_control_calibrating_for_too_few_items_breaks_dp() -> None:
    # a mechanism calibrated for max_items = 1 leaks more than eps on 2-item sets
    eps, d = 1.0, 4
    wrong = UnaryEncoding(universe=universe(d), max_items=1, epsilon=eps)
    table = _log_likelihoods(_admissible_sets(d, 2), d, wrong.p, wrong.q)
    assert float((table.max(axis=0) - table.min(axis=0)).max()) > eps + 0.5


def test_set_epsilon_counts_worst_case_differing_bits() -> None:
    p, q = 0.5, 0.2
    alpha, beta = math.log(p / q), math.log((1 - q) / (1 - p))
    assert set_epsilon(p, q, 10, 3) == pytest.approx(3 * alpha + 3 * beta)
    assert set_epsilon(p, q, 5, 3) == pytest.approx(3 * alpha + 2 * beta)  # only 5 bits
    assert set_epsilon(p, q, 2, 3) == pytest.approx(2 * alpha)  # A = U, B = {}


# --- error and lower bound -------------------------------------------------------------------


@pytest.mark.parametrize(("d", "k"), [(20, 3), (6, 3), (3, 5), (50, 1)])
@pytest.mark.parametrize("variant", ["optimized", "symmetric"])
def test_expected_error_and_gamma_bounds(d: int, k: int, variant: str) -> None:
    eps = 1.0
    mech = UnaryEncoding(universe=universe(d), max_items=k, epsilon=eps, variant=variant)  # type: ignore[arg-type]
    p, q = mech.p, mech.q
    s = min(k, d)
    worst = max(s * (1 - p) + (d - s) * q, d * q)  # |S| = min(k, d) or the empty set
    assert mech.expected_error == pytest.approx(worst, rel=1e-12)
    diam = min(2 * k, d)
    thm53 = diam / (2 * (1 + math.exp(eps)))
    m = sum(math.comb(d, i) for i in range(min(k, d) + 1)) - 1
    thm55 = m / (m + math.exp(eps))
    assert mech.gamma_diameter_bound == pytest.approx(thm53, rel=1e-12)
    assert mech.gamma_discrete_bound == pytest.approx(thm55, rel=1e-12)
    assert mech.gamma_lower_bound == pytest.approx(max(thm53, thm55), rel=1e-12)
    assert mech.gamma_lower_bound <= mech.expected_error


def test_diameter_bound_wins_at_small_epsilon() -> None:
    mech = UnaryEncoding(universe=universe(40), max_items=10, epsilon=0.1)
    assert mech.gamma_lower_bound == mech.gamma_diameter_bound > 1.0


@pytest.mark.parametrize("n", [1, 50, 10_000])
def test_estimator_variance_is_worst_case_of_exact_form(n: int) -> None:
    for variant in ("optimized", "symmetric"):
        mech = UnaryEncoding(universe=universe(8), max_items=2, epsilon=2.0, variant=variant)
        p, q = mech.p, mech.q
        worst = max(ref_variance(n, 0.0, p, q), ref_variance(n, 1.0, p, q))
        assert mech.estimator_variance(n) == pytest.approx(worst, rel=1e-12)
    oue = UnaryEncoding(universe=universe(8), max_items=1, epsilon=2.0)
    # Wang et al.: OUE at f = 0 has variance 4 e^eps / (n (e^eps - 1)^2)
    assert oue.frequency_variance(n, 0.0) == pytest.approx(
        4 * math.exp(2.0) / (n * (math.exp(2.0) - 1) ** 2), rel=1e-12
    )


@pytest.mark.parametrize("eps", [60.0, 800.0, 1e6])
def test_huge_epsilon_neither_overflows_nor_warns(eps: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for variant in ("optimized", "symmetric"):
            mech = UnaryEncoding(universe=universe(6), max_items=2, epsilon=eps, variant=variant)
            bits = mech.encode([{"hobby0", "hobby3"}, set()] * 50)
            out = mech.release(bits, SeededSource(3))
            assert math.isfinite(mech.gamma_lower_bound)
            assert math.isfinite(mech.expected_error)
            assert mech.realized_epsilon <= eps
    # every flip probability is at most 2**-63 (OUE keeps 1 w.p. 1/2, so compare zeros only)
    assert not out[~bits].any()


# --- validation and encoding ----------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"universe": ["a"], "max_items": 1, "epsilon": 1.0},
        {"universe": ["a", "b", "a"], "max_items": 1, "epsilon": 1.0},
        {"universe": ["a", 2], "max_items": 1, "epsilon": 1.0},
        {"universe": ["a", "b"], "max_items": 0, "epsilon": 1.0},
        {"universe": ["a", "b"], "max_items": True, "epsilon": 1.0},
        {"universe": ["a", "b"], "max_items": 1.5, "epsilon": 1.0},
        {"universe": ["a", "b"], "max_items": 1, "epsilon": 0.0},
        {"universe": ["a", "b"], "max_items": 1, "epsilon": math.inf},
        {"universe": ["a", "b"], "max_items": 1, "epsilon": 1.0, "variant": "rappor"},
    ],
)
def test_invalid_parameters_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(MechanismError):
        UnaryEncoding(**kwargs)  # type: ignore[arg-type]


def test_encode_builds_bit_vectors() -> None:
    mech = UnaryEncoding(universe=["chess", "golf", "yoga"], max_items=2, epsilon=1.0)
    bits = mech.encode([{"yoga"}, [], ["chess", "golf"], ["golf", "golf"]])
    assert bits.tolist() == [
        [False, False, True],
        [False, False, False],
        [True, True, False],
        [False, True, False],
    ]
    assert bits.dtype == np.bool_


def test_encode_refuses_unknown_and_oversized_sets_without_echoing_items() -> None:
    mech = UnaryEncoding(universe=["chess", "golf", "yoga"], max_items=2, epsilon=1.0)
    with pytest.raises(MechanismError) as err:
        mech.encode([{"chess"}, {"secret-hobby"}])
    assert "secret-hobby" not in str(err.value)
    assert "position 1" in str(err.value)
    with pytest.raises(MechanismError) as err:
        mech.encode([{"chess", "golf", "yoga"}])
    assert "chess" not in str(err.value)


def test_release_refuses_oversized_sets_and_wrong_shapes() -> None:
    mech = UnaryEncoding(universe=universe(4), max_items=2, epsilon=1.0)
    source = CountingSource(4)
    with pytest.raises(MechanismError):
        mech.release(np.array([[True, True, True, False]]), source)
    with pytest.raises(MechanismError):
        mech.release(np.zeros((3, 5), dtype=bool), source)
    with pytest.raises(MechanismError):
        mech.release(np.zeros((3, 4), dtype=np.int64), source)
    with pytest.raises(MechanismError):
        mech.release(np.zeros(4, dtype=bool), source)
    assert source.calls == []  # nothing drawn for a refused batch


# --- release: contract, ranges, determinism -------------------------------------------------


def test_release_draws_words_once_with_one_word_per_bit() -> None:
    mech = UnaryEncoding(universe=universe(7), max_items=3, epsilon=1.0)
    source = CountingSource(5)
    bits = mech.encode([{"hobby1", "hobby2"}, {"hobby6"}, set()] * 10)
    out = mech.release(bits, source)
    assert source.calls == [(30, 7)]
    assert out.shape == (30, 7)
    assert out.dtype == np.bool_


def test_release_is_deterministic_given_the_words() -> None:
    mech = UnaryEncoding(universe=universe(9), max_items=2, epsilon=1.0, variant="symmetric")
    bits = mech.encode([{"hobby0"}, {"hobby3", "hobby8"}] * 200)
    a = mech.release(bits, SeededSource(6))
    assert np.array_equal(a, mech.release(bits, SeededSource(6)))
    assert not np.array_equal(a, mech.release(bits, SeededSource(7)))


def test_release_of_empty_batch() -> None:
    mech = UnaryEncoding(universe=universe(3), max_items=1, epsilon=1.0)
    assert mech.release(np.zeros((0, 3), dtype=bool), SeededSource(8)).shape == (0, 3)


# --- bit flips vs the exact pmf ----------------------------------------------------------------

N_DRAWS = 20_000
CHI2_ALPHA = 1e-4  # false-failure probability per chi-square test


@pytest.mark.parametrize(
    ("variant", "eps", "true_set", "seed"),
    [
        ("optimized", 1.0, (0,), 11),
        ("optimized", 3.0, (0, 2), 12),
        ("optimized", 0.3, (), 13),
        ("symmetric", 1.0, (1,), 14),
        ("symmetric", 3.0, (0, 1), 15),
        ("symmetric", 0.3, (2,), 16),
    ],
)
def test_joint_output_distribution_matches_product_pmf(
    variant: str, eps: float, true_set: tuple[int, ...], seed: int
) -> None:
    # d = 3, k = 2: all 8 output vectors, pmf = product of independent bit pmfs
    d, k = 3, 2
    mech = UnaryEncoding(universe=universe(d), max_items=k, epsilon=eps, variant=variant)  # type: ignore[arg-type]
    p, q = unary_probabilities(d, k, eps, variant)  # type: ignore[arg-type]
    bits = np.zeros((N_DRAWS, d), dtype=bool)
    bits[:, list(true_set)] = True
    out = mech.release(bits, SeededSource(seed))
    codes = out.astype(np.int64) @ (1 << np.arange(d))
    counts = np.bincount(codes, minlength=2**d)
    pmf = np.ones(2**d)
    for code in range(2**d):
        for j in range(d):
            one = p if j in true_set else q
            pmf[code] *= one if (code >> j) & 1 else 1 - one
    expected = N_DRAWS * pmf
    assert expected.min() >= 5
    assert stats.chisquare(counts, expected).pvalue > CHI2_ALPHA


def test_bit_marginals_on_a_larger_universe() -> None:
    # d = 30 independent bits: sum of the per-bit chi-square statistics ~ chi2(30)
    d, k, eps = 30, 4, 2.0
    mech = UnaryEncoding(universe=universe(d), max_items=k, epsilon=eps)
    q = 1.0 / (math.exp(eps / k) + 1.0)
    truth = np.zeros(d, dtype=bool)
    truth[[3, 7, 11, 29]] = True
    out = mech.release(np.tile(truth, (N_DRAWS, 1)), SeededSource(17))
    prob = np.where(truth, 0.5, q)
    ones = out.sum(axis=0)
    stat = float((((ones - N_DRAWS * prob) ** 2) / (N_DRAWS * prob * (1 - prob))).sum())
    assert stats.chi2.sf(stat, d) > CHI2_ALPHA


def test_chi_square_detects_a_wrong_epsilon() -> None:
    # negative control: OUE at eps = 1 is rejected against the pmf for eps = 1.3
    d = 3
    mech = UnaryEncoding(universe=universe(d), max_items=1, epsilon=1.0)
    out = mech.release(np.zeros((N_DRAWS, d), dtype=bool), SeededSource(18))
    wrong_q = 1.0 / (math.exp(1.3) + 1.0)
    ones = out.sum(axis=0)
    counts = np.concatenate([ones, N_DRAWS - ones])
    expected = np.concatenate([np.full(d, N_DRAWS * wrong_q), np.full(d, N_DRAWS * (1 - wrong_q))])
    assert stats.chisquare(counts, expected, ddof=0).pvalue < CHI2_ALPHA


def test_observed_hamming_error_matches_expected_error() -> None:
    # worst-case set (|S| = k): mean Hamming distance within 5 sd of E[rho]; alpha ~ 6e-7
    d, k, eps = 12, 3, 1.0
    mech = UnaryEncoding(universe=universe(d), max_items=k, epsilon=eps)
    truth = np.zeros((N_DRAWS, d), dtype=bool)
    truth[:, :k] = True
    out = mech.release(truth, SeededSource(19))
    q = 1.0 / (math.exp(eps / k) + 1.0)
    mean_flips = k * 0.5 + (d - k) * q
    sd = math.sqrt(k * 0.25 + (d - k) * q * (1 - q)) / math.sqrt(N_DRAWS)
    assert abs(float((out != truth).sum(axis=1).mean()) - mean_flips) <= 5 * sd
    assert mech.expected_error == pytest.approx(mean_flips, rel=1e-12)


# --- the analyst's estimator --------------------------------------------------------------------
#
# R independent replications of n records, from one release. Universe of 6 hobbies,
# max 2 items; 50% hold {0, 1}, 20% hold {0}, 30% hold {} -> f = (0.7, 0.5, 0, 0, 0, 0).
# Given the data all bits are independent, so all 6R intervals are independent.

R_REPS = 300
N_PER_REP = 500
FREQ = np.array([0.7, 0.5, 0.0, 0.0, 0.0, 0.0])


def _replicated(variant: str, eps: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    mech = UnaryEncoding(universe=universe(6), max_items=2, epsilon=eps, variant=variant)  # type: ignore[arg-type]
    one_rep = mech.encode(
        [{"hobby0", "hobby1"}] * 250 + [{"hobby0"}] * 100 + [set()] * 150  # n = 500
    )
    out = mech.release(np.tile(one_rep, (R_REPS, 1)), SeededSource(seed))
    out = out.reshape(R_REPS, N_PER_REP, 6)
    results = [
        estimate_item_frequencies(out[r], eps, max_items=2, variant=variant)  # type: ignore[arg-type]
        for r in range(R_REPS)
    ]
    return np.array([e for e, _ in results]), np.array([s for _, s in results])


@pytest.mark.parametrize(
    ("variant", "eps", "seed"),
    [("optimized", 1.0, 21), ("optimized", 4.0, 22), ("symmetric", 2.0, 23)],
)
def test_estimator_is_unbiased_with_exact_variance_and_covering_intervals(
    variant: str, eps: float, seed: int
) -> None:
    p, q = unary_probabilities(6, 2, eps, variant)  # type: ignore[arg-type]
    estimates, stderrs = _replicated(variant, eps, seed)
    sds = np.sqrt([ref_variance(N_PER_REP, f, p, q) for f in FREQ])
    # unbiased: each item's mean within 4.5 sd/sqrt(R) (normal tail, 6 items: alpha ~ 4e-5)
    assert np.all(np.abs(estimates.mean(axis=0) - FREQ) <= 4.5 * sds / math.sqrt(R_REPS))
    # variance per item: s^2 / sd^2 ~ chi2(R-1), two-sided alpha 1e-5 per item
    stat = (R_REPS - 1) * estimates.var(axis=0, ddof=1) / sds**2
    assert np.all(stat > stats.chi2.ppf(5e-6, R_REPS - 1))
    assert np.all(stat < stats.chi2.isf(5e-6, R_REPS - 1))
    # stderr: the exact form at the clipped estimate, close to the true sd on average
    assert np.all(stderrs.mean(axis=0) >= 0.97 * sds)
    assert np.all(stderrs.mean(axis=0) <= 1.05 * sds)
    # coverage of the 6R independent 95% intervals ~ Binomial(6R, >= 0.94); alpha 1e-5
    covered = int(np.count_nonzero(np.abs(estimates - FREQ) <= 1.96 * stderrs))
    assert covered >= stats.binom.ppf(1e-5, 6 * R_REPS, 0.94)


def test_estimator_formula_on_a_small_example() -> None:
    eps, k = 1.0, 1
    p, q = 0.5, 1.0 / (math.exp(eps) + 1.0)
    bits = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0], [1, 0, 1]], dtype=bool)
    est, se = estimate_item_frequencies(bits, eps, max_items=k)
    mean = bits.mean(axis=0)
    assert est == pytest.approx((mean - q) / (p - q), rel=1e-12)
    f = np.clip((mean - q) / (p - q), 0, 1)
    assert se == pytest.approx([math.sqrt(ref_variance(4, fj, p, q)) for fj in f], rel=1e-12)


def test_estimator_rejects_empty_reports() -> None:
    with pytest.raises(MechanismError):
        estimate_item_frequencies(np.zeros((0, 3), dtype=bool), 1.0, max_items=1)
    with pytest.raises(MechanismError):
        estimate_item_frequencies(np.zeros(3, dtype=bool), 1.0, max_items=1)

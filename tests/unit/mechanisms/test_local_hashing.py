"""Optimal local hashing: parameters, the public hash, the bucket RR, privacy, the estimator.

Expected values are written here from the formulas of Wang et al. (2017) and
DESIGN.md section 1, independently of the module under test. Statistical
tests use fixed seeds (``SeededSource``); each states its false-failure
probability over the choice of seed.
"""

from __future__ import annotations

import hashlib
import math
import warnings

import numpy as np
import pytest
from privstream.errors import MechanismError
from privstream.mechanisms.local_hashing import (
    BUCKET_COLUMN,
    SEED_COLUMN,
    OptimalLocalHashing,
    estimate_frequencies,
    hash_to_bucket,
    splitmix64,
    value_digests,
)
from privstream.testing import SeededSource
from scipy import stats

from tests.support.configs import CountingSource

MASK = (1 << 64) - 1


# --- independent reference formulas ----------------------------------------------------


def ref_buckets(eps: float) -> int:
    """g = round(e^eps) + 1, with g - 1 capped at 2**32."""
    if eps > 30:
        return 2**32 + 1
    return min(math.floor(math.exp(eps) + 0.5), 2**32) + 1


def ref_keep(eps: float, g: int) -> float:
    return math.exp(eps) / (math.exp(eps) + g - 1)


def ref_splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def ref_bucket(seed: int, value: str, g: int) -> int:
    h = int.from_bytes(hashlib.blake2b(value.encode("utf-8"), digest_size=8).digest(), "little")
    return ref_splitmix64(h ^ seed) % g


def ref_variance(n: int, f: float, p: float, g: int) -> float:
    """Wang et al. Var[f_hat] given the data, exact form."""
    return (f * p * (1 - p) + (1 - f) * (1 / g) * (1 - 1 / g)) / (n * (p - 1 / g) ** 2)


def _true_buckets(out: np.ndarray, value: str, g: int) -> np.ndarray:
    return hash_to_bucket(out[:, SEED_COLUMN], value_digests([value]), g)


# --- parameters ---------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.05, 0.3, 0.5, math.log(3.0), 1.0, 2.0, 5.0, 10.0])
def test_parameters_follow_wang_et_al(eps: float) -> None:
    olh = OptimalLocalHashing(epsilon=eps)
    g = ref_buckets(eps)
    p = ref_keep(eps, g)
    assert olh.buckets == g
    assert olh.delta == 0.0
    assert olh.keep_probability == pytest.approx(p, rel=1e-12)
    assert olh.q == pytest.approx(1.0 / (math.exp(eps) + g - 1), rel=1e-12)
    assert olh.expected_error == pytest.approx(1.0 - p, rel=1e-12)
    # Theorem 5.5 on the bucket domain, m = g - 1, kappa = 1: met exactly
    assert olh.gamma_lower_bound == pytest.approx((g - 1) / (g - 1 + math.exp(eps)), rel=1e-12)
    assert olh.gamma_lower_bound == pytest.approx(olh.expected_error, rel=1e-12)
    assert olh.params()["buckets"] == g
    # the true bucket stays the most likely report
    assert olh.keep_probability > olh.q


def test_bucket_count_examples() -> None:
    # eps -> e^eps -> round -> +1
    assert [OptimalLocalHashing(epsilon=e).buckets for e in (0.1, 0.5, 1.0, 2.0, 3.0)] == [
        2,  # e^0.1 = 1.105
        3,  # e^0.5 = 1.649
        4,  # e^1 = 2.718
        8,  # e^2 = 7.389
        21,  # e^3 = 20.09
    ]


@pytest.mark.parametrize("eps", [22.5, 40.0, 800.0, 1e6])
def test_huge_epsilon_caps_buckets_without_overflow(eps: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        olh = OptimalLocalHashing(epsilon=eps)
        out = olh.release(np.array(["a", "b"] * 50, dtype=object), SeededSource(7))
        gamma = olh.gamma_lower_bound
    assert olh.buckets == 2**32 + 1
    assert math.isfinite(gamma)
    assert 0.0 <= olh.expected_error < 0.5
    assert int(out[:, BUCKET_COLUMN].max()) <= 2**32


@pytest.mark.parametrize("n", [1, 10, 1000])
def test_estimator_variance_is_worst_case_of_exact_form(n: int) -> None:
    for eps in (0.1, 1.0, 3.0):
        olh = OptimalLocalHashing(epsilon=eps)
        g, p = ref_buckets(eps), ref_keep(eps, ref_buckets(eps))
        worst = max(ref_variance(n, 0.0, p, g), ref_variance(n, 1.0, p, g))
        assert olh.estimator_variance(n) == pytest.approx(worst, rel=1e-12)
        assert olh.frequency_variance(n, 0.3) == pytest.approx(ref_variance(n, 0.3, p, g))


@pytest.mark.parametrize(
    "kwargs", [{"epsilon": 0.0}, {"epsilon": -1.0}, {"epsilon": math.nan}, {"epsilon": math.inf}]
)
def test_invalid_epsilon_is_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(MechanismError):
        OptimalLocalHashing(**kwargs)


def test_zero_records_has_no_variance() -> None:
    with pytest.raises(MechanismError):
        OptimalLocalHashing(epsilon=1.0).estimator_variance(0)


# --- the public hash ---------------------------------------------------------------------


def test_splitmix64_matches_reference() -> None:
    # first output of Vigna's splitmix64 seeded with 0
    assert int(splitmix64(np.array([0], dtype=np.uint64))[0]) == 0xE220A8397B1DCDAF
    xs = SeededSource(11).words(200, 1)[:, 0]
    ours = splitmix64(xs)
    assert [int(v) for v in ours] == [ref_splitmix64(int(x)) for x in xs]


def test_value_digest_and_bucket_match_reference() -> None:
    values = ["", "a", "Ljubljana", "Café", "日本語", "x" * 1000]
    seeds = SeededSource(12).words(len(values), 1)[:, 0]
    for g in (2, 3, 149, 2**32 + 1):
        got = hash_to_bucket(seeds, value_digests(values), g)
        assert [int(b) for b in got] == [
            ref_bucket(int(s), v, g) for s, v in zip(seeds, values, strict=True)
        ]


def test_digest_rejects_non_strings_without_echoing_them() -> None:
    with pytest.raises(MechanismError) as err:
        value_digests(["ok", 123456789])
    assert "123456789" not in str(err.value)
    assert "position 1" in str(err.value)


def test_a_lone_surrogate_is_hashed_like_any_string() -> None:
    """``"\ud800"`` is valid JSON; its surrogatepass bytes are no valid string's UTF-8."""
    lone, paired = "a\ud800", "a\U00010000"
    assert value_digests([lone]).tolist() == [
        int.from_bytes(hashlib.blake2b(b"a\xed\xa0\x80", digest_size=8).digest(), "little")
    ]
    assert len(set(value_digests([lone, "a\udc00", paired, "a"]).tolist())) == 4


# With a uniform seed the hash of one value is uniform over the buckets, and two
# distinct values collide with probability 1/g (the random-function model the
# estimator relies on). N = 30_000 seeds; alpha = 1e-4 per test.
@pytest.mark.parametrize(("pair", "g"), [(("a", "b"), 3), (("user1", "user2"), 4), (("", " "), 8)])
def test_hash_is_uniform_and_collides_at_rate_one_over_g(pair: tuple[str, str], g: int) -> None:
    n = 30_000
    seeds = SeededSource(13).words(n, 1)[:, 0]
    hu = hash_to_bucket(seeds, value_digests([pair[0]]), g)
    hv = hash_to_bucket(seeds, value_digests([pair[1]]), g)
    counts = np.bincount(hu.astype(np.int64), minlength=g)
    assert stats.chisquare(counts, np.full(g, n / g)).pvalue > 5e-5
    collisions = int(np.count_nonzero(hu == hv))
    assert stats.binomtest(collisions, n, 1.0 / g).pvalue > 5e-5


# --- release: contract, ranges, determinism -------------------------------------------------


def test_release_draws_words_once_and_carries_the_seed() -> None:
    olh = OptimalLocalHashing(epsilon=1.0)
    source = CountingSource(21)
    values = np.array(["a", "b", "c", "d"] * 25, dtype=object)
    out = olh.release(values, source)
    assert source.calls == [(100, 3)]
    assert out.shape == (100, 2)
    assert out.dtype == np.uint64
    assert np.array_equal(out[:, SEED_COLUMN], SeededSource(21).words(100, 3)[:, 0])
    assert int(out[:, BUCKET_COLUMN].max()) < olh.buckets


def test_release_accepts_numpy_string_arrays() -> None:
    olh = OptimalLocalHashing(epsilon=1.0)
    as_str = olh.release(np.array(["x", "yy", "zzz"]), SeededSource(22))
    as_obj = olh.release(np.array(["x", "yy", "zzz"], dtype=object), SeededSource(22))
    assert np.array_equal(as_str, as_obj)


def test_release_is_deterministic_given_the_words() -> None:
    olh = OptimalLocalHashing(epsilon=2.0)
    values = np.array([f"v{i % 17}" for i in range(500)], dtype=object)
    a = olh.release(values, SeededSource(23))
    b = olh.release(values, SeededSource(23))
    c = olh.release(values, SeededSource(24))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_release_of_empty_column() -> None:
    out = OptimalLocalHashing(epsilon=1.0).release(np.array([], dtype=object), SeededSource(25))
    assert out.shape == (0, 2)


def test_release_refuses_non_strings_and_non_columns() -> None:
    olh = OptimalLocalHashing(epsilon=1.0)
    source = CountingSource(26)
    with pytest.raises(MechanismError):
        olh.release(np.array([1, 2], dtype=object), source)
    with pytest.raises(MechanismError):
        olh.release(np.array([["a", "b"], ["c", "d"]], dtype=object), source)
    assert source.calls == []  # nothing drawn for a refused column


# --- bucket randomized response vs the exact pmf ------------------------------------------

N_DRAWS = 20_000
CHI2_ALPHA = 1e-4  # false-failure probability per chi-square test


@pytest.mark.parametrize(
    ("eps", "seed"), [(0.1, 31), (0.5, 32), (1.0, 33), (2.0, 34), (3.0, 35), (5.0, 36)]
)
def test_report_offset_follows_bucket_rr_pmf(eps: float, seed: int) -> None:
    # (y - H_s(v)) mod g is 0 w.p. p and each of 1..g-1 w.p. q = 1/(e^eps + g - 1)
    g = ref_buckets(eps)
    olh = OptimalLocalHashing(epsilon=eps)
    out = olh.release(np.full(N_DRAWS, "alice", dtype=object), SeededSource(seed))
    truth = _true_buckets(out, "alice", g).astype(np.int64)
    offset = (out[:, BUCKET_COLUMN].astype(np.int64) - truth) % g
    counts = np.bincount(offset, minlength=g)
    pmf = np.full(g, 1.0 / (math.exp(eps) + g - 1))
    pmf[0] = ref_keep(eps, g)
    expected = N_DRAWS * pmf
    assert expected.min() >= 5
    assert stats.chisquare(counts, expected).pvalue > CHI2_ALPHA


@pytest.mark.parametrize(("eps", "seed"), [(1.0, 37), (2.0, 38)])
def test_reported_bucket_is_uniform_marginally(eps: float, seed: int) -> None:
    # the seed makes H_s(v) uniform, and RR maps a uniform bucket to a uniform report
    g = ref_buckets(eps)
    out = OptimalLocalHashing(epsilon=eps).release(
        np.full(N_DRAWS, "bob", dtype=object), SeededSource(seed)
    )
    counts = np.bincount(out[:, BUCKET_COLUMN].astype(np.int64), minlength=g)
    assert stats.chisquare(counts, np.full(g, N_DRAWS / g)).pvalue > CHI2_ALPHA


def test_chi_square_detects_a_wrong_epsilon() -> None:
    # negative control: reports at eps = 1 are rejected against the pmf for eps = 1.3 (same g)
    g = 4
    out = OptimalLocalHashing(epsilon=1.0).release(
        np.full(N_DRAWS, "alice", dtype=object), SeededSource(39)
    )
    offset = (out[:, BUCKET_COLUMN].astype(np.int64) - _true_buckets(out, "alice", g)) % g
    pmf = np.full(g, 1.0 / (math.exp(1.3) + g - 1))
    pmf[0] = ref_keep(1.3, g)
    counts = np.bincount(offset.astype(np.int64), minlength=g)
    assert stats.chisquare(counts, N_DRAWS * pmf).pvalue < CHI2_ALPHA


# --- empirical privacy audit on a small domain ---------------------------------------------
#
# Reports (s, y) live in a huge space; the events that matter are defined through the
# public hash: for a pair of values (v, w), with x = H_s(v), x' = H_s(w),
#   only_v = {y = x != x'}, only_w = {y = x' != x}, both = {y = x = x'}, neither.
# Their exact probabilities under v (random-function model, q = 1/(e^eps + g - 1)):
#   only_v: p (1 - 1/g)   only_w: q (1 - 1/g)   both: p/g
#   neither: (1/g)(1 - p) + (1 - 1/g)(1 - p - q)
# and symmetrically under w. only_v attains the ratio e^eps exactly.
# Hoeffding: each empirical probability is within t of the truth with probability
# 1 - a; 3 pairs x 4 events x 2 samples estimates per eps, a = 1e-6 each, so the
# false-failure probability is <= 2.4e-5 per parametrized case.

N_AUDIT = 100_000
A_PER_ESTIMATE = 1e-6
T_AUDIT = math.sqrt(math.log(2.0 / A_PER_ESTIMATE) / (2.0 * N_AUDIT))


def _events(out: np.ndarray, v: str, w: str, g: int) -> dict[str, float]:
    x = _true_buckets(out, v, g)
    xw = _true_buckets(out, w, g)
    y = out[:, BUCKET_COLUMN]
    return {
        "only_v": float(np.mean((y == x) & (x != xw))),
        "only_w": float(np.mean((y == xw) & (x != xw))),
        "both": float(np.mean((y == x) & (x == xw))),
        "neither": float(np.mean((y != x) & (y != xw))),
    }


def _exact_events(p: float, q: float, g: int) -> dict[str, float]:
    return {
        "only_v": p * (1 - 1 / g),
        "only_w": q * (1 - 1 / g),
        "both": p / g,
        "neither": (1 / g) * (1 - p) + (1 - 1 / g) * (1 - p - q),
    }


@pytest.mark.parametrize(("eps", "seed"), [(0.5, 41), (1.0, 42), (2.0, 43)])
def test_olh_satisfies_dp_inequality_on_small_domain(eps: float, seed: int) -> None:
    domain = ["red", "green", "blue"]
    g = ref_buckets(eps)
    p = ref_keep(eps, g)
    q = 1.0 / (math.exp(eps) + g - 1)
    olh = OptimalLocalHashing(epsilon=eps)
    source = SeededSource(seed)
    reports = {v: olh.release(np.full(N_AUDIT, v, dtype=object), source) for v in domain}
    slack = T_AUDIT * (1.0 + math.exp(eps))
    exact_v = _exact_events(p, q, g)
    worst_ratio_event = 0.0
    for i, v in enumerate(domain):
        for w in domain[i + 1 :]:
            under_v = _events(reports[v], v, w, g)
            under_w = _events(reports[w], v, w, g)
            # under w the roles of only_v and only_w swap
            exact_w = dict(exact_v, only_v=exact_v["only_w"], only_w=exact_v["only_v"])
            for name in under_v:
                assert under_v[name] == pytest.approx(exact_v[name], abs=T_AUDIT)
                assert under_w[name] == pytest.approx(exact_w[name], abs=T_AUDIT)
                for a, b in ((under_v, under_w), (under_w, under_v)):
                    # the event and its complement, both directions
                    assert a[name] <= math.exp(eps) * b[name] + slack
                    assert 1 - a[name] <= math.exp(eps) * (1 - b[name]) + slack
            worst_ratio_event = max(
                worst_ratio_event, under_v["only_v"] - math.exp(eps) * under_w["only_v"]
            )
    # tight: the event only_v attains the bound, P(A|v) - e^eps P(A|w) = 0
    assert worst_ratio_event >= -slack


# --- the analyst's estimator ------------------------------------------------------------------
#
# R independent replications of n records each, from one release (rows are independent).
# Truth: "a" 40%, "b" 10%, the rest distinct one-off values; "absent" never occurs.

R_REPS = 1000
N_PER_REP = 400
TRUTH = {"a": 0.4, "b": 0.1, "absent": 0.0}


def _replicated_estimates(eps: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    n_a, n_b = int(TRUTH["a"] * N_PER_REP), int(TRUTH["b"] * N_PER_REP)
    rest = N_PER_REP - n_a - n_b
    values = np.array(
        [
            value
            for rep in range(R_REPS)
            for value in ["a"] * n_a + ["b"] * n_b + [f"u{rep}-{j}" for j in range(rest)]
        ],
        dtype=object,
    )
    out = OptimalLocalHashing(epsilon=eps).release(values, SeededSource(seed))
    out = out.reshape(R_REPS, N_PER_REP, 2)
    estimates = np.empty((R_REPS, len(TRUTH)))
    stderrs = np.empty((R_REPS, len(TRUTH)))
    for rep in range(R_REPS):
        estimates[rep], stderrs[rep] = estimate_frequencies(
            out[rep, :, SEED_COLUMN], out[rep, :, BUCKET_COLUMN], list(TRUTH), eps
        )
    return estimates, stderrs


@pytest.mark.parametrize(("eps", "seed"), [(1.0, 51), (3.0, 52)])
def test_estimator_is_unbiased_with_exact_variance_and_covering_intervals(
    eps: float, seed: int
) -> None:
    g = ref_buckets(eps)
    p = ref_keep(eps, g)
    estimates, stderrs = _replicated_estimates(eps, seed)
    for j, f in enumerate(TRUTH.values()):
        sd = math.sqrt(ref_variance(N_PER_REP, f, p, g))
        col = estimates[:, j]
        # unbiased: |mean - f| <= 4.5 sd / sqrt(R); normal tail 2 Phi(-4.5) ~ 7e-6
        assert abs(col.mean() - f) <= 4.5 * sd / math.sqrt(R_REPS)
        # variance: s^2 / sd^2 ~ chi2(R-1); two-sided alpha = 1e-4
        stat = (R_REPS - 1) * col.var(ddof=1) / sd**2
        assert stats.chi2.ppf(5e-5, R_REPS - 1) < stat < stats.chi2.isf(5e-5, R_REPS - 1)
        # the exact variance at the clipped estimate: close to the true sd on average
        mean_se = float(stderrs[:, j].mean())
        assert 0.97 * sd <= mean_se <= 1.05 * sd
        # 95% intervals cover: per candidate coverage ~ Binomial(R, >= 0.94); the
        # threshold is its 1e-4/3 quantile (union over 3 candidates: alpha 1e-4)
        covered = np.count_nonzero(np.abs(col - f) <= 1.96 * stderrs[:, j])
        assert covered >= stats.binom.ppf(1e-4 / 3, R_REPS, 0.94)


def test_estimator_matches_reference_counting() -> None:
    # c(v) = #{i : H_{s_i}(v) == y_i}, counted here one report at a time
    eps = 1.0
    g = ref_buckets(eps)
    p = ref_keep(eps, g)
    values = np.array(["a"] * 30 + ["b"] * 20 + ["c"] * 10, dtype=object)
    out = OptimalLocalHashing(epsilon=eps).release(values, SeededSource(53))
    est, se = estimate_frequencies(out[:, 0], out[:, 1], ["a", "zzz"], eps)
    for k, cand in enumerate(["a", "zzz"]):
        c = sum(ref_bucket(int(s), cand, g) == int(y) for s, y in out)
        f_hat = (c / len(out) - 1 / g) / (p - 1 / g)
        assert est[k] == pytest.approx(f_hat, rel=1e-12)
        f = min(max(f_hat, 0.0), 1.0)
        assert se[k] == pytest.approx(math.sqrt(ref_variance(len(out), f, p, g)), rel=1e-12)


def test_estimator_rejects_inconsistent_reports() -> None:
    seeds = np.zeros(3, dtype=np.uint64)
    with pytest.raises(MechanismError):
        estimate_frequencies(seeds, np.zeros(2, dtype=np.uint64), ["a"], 1.0)
    with pytest.raises(MechanismError):
        estimate_frequencies(seeds[:0], seeds[:0], ["a"], 1.0)
    with pytest.raises(MechanismError):  # a bare string is not a list of candidates
        estimate_frequencies(seeds, seeds, "abc", 1.0)
    with pytest.raises(MechanismError):  # bucket 4 does not exist at eps = 1 (g = 4)
        estimate_frequencies(seeds, np.array([0, 1, 4], dtype=np.uint64), ["a"], 1.0)

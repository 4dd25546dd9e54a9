"""Subset Selection (issue 35, item 1): the realised law, the sampler, the estimator.

The exact-law tests feed the real ``release`` every draw vector of the
shuffle (a word ``r`` is the residue ``r`` itself), weight each by the number
of 64-bit words with that residue and the include threshold, and compare the
output pmf of every pair of inputs in exact rationals. The statistical tests
use fixed seeds; each states its false-failure probability for a random one.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from numpy.typing import NDArray
from privstream.errors import MechanismError
from privstream.mechanisms.base import exp_lower_bound
from privstream.mechanisms.subset_selection import (
    SubsetSelection,
    certify,
    estimate_frequencies,
    ideal_probabilities,
    optimal_subset_size,
    pick_weights,
)
from privstream.testing import SeededSource
from scipy import stats

from tests.support.configs import CountingSource

TWO_64 = 2**64


class FixedWords:
    """A noise source that returns the given words (one ``words`` call)."""

    def __init__(self, words: NDArray[np.uint64]) -> None:
        self.rows = words

    def words(self, n: int, k: int) -> NDArray[np.uint64]:
        assert self.rows.shape == (n, k)
        return self.rows

    def more_words(self, rows: NDArray[np.int64], start: int, k: int) -> NDArray[np.uint64]:
        raise AssertionError("subset selection draws once")


def exact_pmf(mech: SubsetSelection, value: int) -> dict[tuple[int, ...], Fraction]:
    """``P(S | value)`` of the realised sampler, for every output ``S``, in exact rationals."""
    k, d = len(mech.domain), mech.subset_size
    draws = list(itertools.product(*(range(k - 1 - i) for i in range(d))))
    words, weights = [], []
    for include, weight in ((0, mech.threshold), (TWO_64 - 1, TWO_64 - mech.threshold)):
        for draw in draws:
            words.append([include, *draw])
            count = math.prod(
                pick_weights(k - 1 - i)[0] + (r < TWO_64 % (k - 1 - i)) for i, r in enumerate(draw)
            )
            weights.append(weight * count)
    source = FixedWords(np.array(words, dtype=np.uint64))
    out = mech.release(np.full(len(words), value, dtype=np.int64), source)
    pmf: dict[tuple[int, ...], Fraction] = Counter()
    for row, weight in zip(out.tolist(), weights, strict=True):
        pmf[tuple(row)] += Fraction(weight, TWO_64 ** (d + 1))
    return pmf


@pytest.mark.parametrize(("k", "eps", "d"), [(3, 0.1, 1), (5, 0.5, 2), (6, 0.1, 3), (8, 0.5, 3)])
def test_the_realised_law_keeps_every_ratio_within_e_eps_and_reaches_it(
    k: int, eps: float, d: int
) -> None:
    mech = SubsetSelection(domain=[f"v{j}" for j in range(k)], epsilon=eps)
    assert mech.subset_size == d
    laws = [exact_pmf(mech, v) for v in range(k)]
    outputs = {tuple(s) for s in itertools.combinations(range(k), d)}
    e = exp_lower_bound(eps)
    worst = Fraction(0)
    for law in laws:
        assert set(law) == outputs  # every d-subset, sorted, and nothing else
        assert sum(law.values()) == 1
    for first, second in itertools.permutations(laws, 2):
        for s in outputs:
            assert first[s] <= e * second[s]
            worst = max(worst, first[s] / second[s])
    # tight: the binding case reaches e^eps up to the 2^-64 rounding of the threshold
    assert float(worst) == pytest.approx(math.exp(eps), rel=1e-12)


@pytest.mark.parametrize("eps", [1e-9, 0.01, 0.5, 2.0, 8.0, 40.0])
def test_construction_certifies_the_threshold_it_uses(eps: float) -> None:
    for k in (2, 5, 48, 1000):
        mech = SubsetSelection(domain=list(range(k)), epsilon=eps)
        assert certify(k, mech.subset_size, mech.threshold, eps)
        # one word more to include the true value breaks the e^eps ratio
        assert not certify(k, mech.subset_size, mech.threshold + 1, eps)
        assert 1 <= mech.threshold < TWO_64


def test_an_epsilon_no_64_bit_threshold_can_certify_is_refused() -> None:
    # w mod 6 is uniform only to 3e-19 relative: more than e^(1e-20) can absorb
    with pytest.raises(MechanismError, match="not certified"):
        SubsetSelection(domain=list(range(7)), epsilon=1e-20)
    assert optimal_subset_size(7, 1e-20) == 1  # p == q in doubles: no division by zero


def test_the_subset_size_minimises_the_summed_variance() -> None:
    for k, eps in [(5, 0.5), (8, 1.0), (16, 2.0), (48, 1.0), (1000, 0.1), (10_000, 8.0)]:
        summed = {}
        for d in range(1, k):
            p, q = ideal_probabilities(k, d, eps)
            summed[d] = (p * (1 - p) + (k - 1) * q * (1 - q)) / (p - q) ** 2
        assert optimal_subset_size(k, eps) == min(summed, key=lambda d: (summed[d], d))
    # Wang et al. 2016: d close to k / (e^eps + 1)
    assert optimal_subset_size(1000, 1.0) == pytest.approx(1000 / (math.e + 1), abs=2)
    with pytest.raises(MechanismError):
        optimal_subset_size(1, 1.0)


def test_release_draws_once_and_gives_sorted_distinct_subsets() -> None:
    mech = SubsetSelection(domain=list(range(48)), epsilon=1.0)
    source = CountingSource(2)
    values = np.arange(5000, dtype=np.int64) % 48
    out = mech.release(values, source)
    assert source.calls == [(5000, mech.subset_size + 1)]
    assert out.shape == (5000, mech.subset_size)
    assert np.all(np.diff(out, axis=1) > 0) and out.min() >= 0 and out.max() < 48
    with pytest.raises(MechanismError):
        mech.release(np.array([48]), source)
    with pytest.raises(MechanismError):
        mech.release(np.array([0.5]), source)


def test_the_sampler_draws_each_subset_at_its_ideal_probability() -> None:
    """Chi-square over the 10 subsets of k = 5, d = 2 at eps 0.5, for input 0.

    The threshold is 0.2 at 0.01 significance: false failure 1e-2 for a random
    seed (the realised law differs from the ideal by 2^-64, invisible here).
    """
    mech = SubsetSelection(domain=list("abcde"), epsilon=0.5)
    n = 200_000
    out = mech.release(np.zeros(n, dtype=np.int64), SeededSource(35))
    seen = Counter(map(tuple, out.tolist()))
    subsets = list(itertools.combinations(range(5), 2))
    p = mech.p
    expected = [n * (p / 4 if 0 in s else (1 - p) / 6) for s in subsets]
    statistic = sum((seen[s] - e) ** 2 / e for s, e in zip(subsets, expected, strict=True))
    assert stats.chi2.sf(statistic, df=len(subsets) - 1) > 0.01


def test_the_estimator_is_unbiased_with_the_stated_variance() -> None:
    """200 releases of 2,000 records, k = 8 at eps 1 (d = 2).

    Mean: within 4 standard errors of the truth for each of 8 values (false failure
    8 * 6.3e-5 = 5e-4 for a random seed). Variance: the sample variance over 200 runs
    within its chi-square 1e-4 / 1 - 1e-4 quantiles (false failure 8 * 2e-4 = 1.6e-3).
    """
    k, n, runs = 8, 2000, 200
    mech = SubsetSelection(domain=list(range(k)), epsilon=1.0)
    assert mech.subset_size == 2
    truth = np.array([0.4, 0.2, 0.1, 0.1, 0.1, 0.05, 0.05, 0.0])
    values = np.repeat(np.arange(k), (truth * n).astype(int))
    source = SeededSource(36)
    estimates = []
    for _ in range(runs):
        out = mech.release(values, source)
        counts = np.bincount(out.ravel(), minlength=k)
        estimates.append(estimate_frequencies(counts, n, mech)[0])
    found = np.array(estimates)
    law = np.array([mech.frequency_variance(n, f) for f in truth])
    assert np.all(np.abs(found.mean(axis=0) - truth) < 4 * np.sqrt(law / runs))
    ratio = found.var(axis=0, ddof=1) / law
    low, high = stats.chi2.ppf([1e-4, 1 - 1e-4], runs - 1) / (runs - 1)
    assert np.all((low < ratio) & (ratio < high)), ratio


def test_standard_errors_follow_the_law_at_the_clipped_estimate() -> None:
    mech = SubsetSelection(domain=list(range(5)), epsilon=0.5)
    counts = np.array([700, 400, 400, 300, 200])
    estimates, stderr = estimate_frequencies(counts, 1000, mech)
    assert estimates.sum() == pytest.approx(1.0)  # every release holds d values
    for f, se in zip(estimates, stderr, strict=True):
        clipped = min(max(f, 0.0), 1.0)
        assert se == pytest.approx(math.sqrt(mech.frequency_variance(1000, clipped)))
    with pytest.raises(MechanismError):
        estimate_frequencies(counts[:4], 1000, mech)


def test_noise_error_is_the_hamming_distance_and_averages_to_expected_error() -> None:
    """Mean error within 5 standard errors (false failure 6e-7 for a random seed)."""
    mech = SubsetSelection(domain=list(range(16)), epsilon=2.0)
    d, n = mech.subset_size, 50_000
    values = np.arange(n, dtype=np.int64) % 16
    out = mech.release(values, SeededSource(37))
    errors = mech.noise_error(values, out)
    assert errors is not None and set(np.unique(errors)) <= {d - 1.0, d + 1.0}
    # Hamming distance between one-hot and subset: 2 per missed value, minus the hit
    held = (out == values[:, None]).any(axis=1)
    assert np.array_equal(errors, np.where(held, d - 1.0, d + 1.0))
    assert abs(errors.mean() - mech.expected_error) < 5 * 2 * math.sqrt(mech.p * (1 - mech.p) / n)
    assert mech.gamma_lower_bound <= mech.expected_error


def test_subset_size_one_is_randomized_response() -> None:
    mech = SubsetSelection(domain=["a", "b", "c"], epsilon=1.0)
    assert mech.subset_size == 1
    assert mech.p == pytest.approx(math.e / (math.e + 2), rel=1e-15)
    assert mech.q == pytest.approx(1 / (math.e + 2), rel=1e-15)

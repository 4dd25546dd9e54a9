"""Randomized response: calibration formulas, edge cases and the output distribution."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from privstream.errors import MechanismError
from privstream.mechanisms import RandomizedResponse
from privstream.testing import SeededSource
from scipy import stats

from tests.support.configs import rr_gamma, rr_p

CASES = [
    # (domain size m+1, eps, delta)
    (2, math.log(3.0), 0.0),
    (2, 0.5, 0.1),
    (3, 1.0, 0.0),
    (3, 0.1, 0.4),
    (48, 1.0, 1e-6),
    (48, 3.0, 0.0),
    (7, 0.5, 0.0),
]


@pytest.mark.parametrize(("size", "eps", "delta"), CASES)
def test_calibration_matches_example_4_10(size: int, eps: float, delta: float) -> None:
    rr = RandomizedResponse(domain=list(range(size)), epsilon=eps, delta=delta)
    m = size - 1
    p = (1.0 - delta) / (m + math.exp(eps))
    assert rr.m == m
    assert rr.p == pytest.approx(p, rel=1e-12)
    assert rr.keep_probability == pytest.approx(1.0 - m * p, rel=1e-12)
    assert rr.expected_error == pytest.approx(m * p, rel=1e-12)
    params = rr.params()
    assert params["p"] == pytest.approx(p, rel=1e-12)
    assert params["keep_probability"] == pytest.approx(1.0 - m * p, rel=1e-12)
    assert params["domain_size"] == size


@pytest.mark.parametrize(("size", "eps", "delta"), CASES)
def test_gamma_lower_bound_is_met_exactly(size: int, eps: float, delta: float) -> None:
    rr = RandomizedResponse(domain=list(range(size)), epsilon=eps, delta=delta)
    m = size - 1
    assert rr.gamma_lower_bound == pytest.approx(rr_gamma(m, eps, delta), rel=1e-12)
    # Example 5.7: RR with the smallest p is optimal, error == bound
    assert rr.gamma_lower_bound == pytest.approx(rr.expected_error, rel=1e-12)


@pytest.mark.parametrize(("size", "eps", "delta"), CASES)
def test_true_value_stays_most_likely(size: int, eps: float, delta: float) -> None:
    rr = RandomizedResponse(domain=list(range(size)), epsilon=eps, delta=delta)
    assert 0.0 < rr.p < 1.0 / size < rr.keep_probability <= 1.0


def test_binary_fair_coin_protocol_is_ln3() -> None:
    # encyclopedia seed: answer truthfully w.p. 1/2, else a fair coin -> keep 3/4, eps = ln 3
    rr = RandomizedResponse(domain=[False, True], epsilon=math.log(3.0))
    assert rr.p == pytest.approx(0.25, rel=1e-12)
    assert rr.keep_probability == pytest.approx(0.75, rel=1e-12)


def test_thesis_example_4_5_parameters() -> None:
    # DESIGN.md / thesis Ex. 4.5 uses p = 0.286 at eps = 0.1, delta = 0.4 (binary question):
    # a valid choice, i.e. at least the minimal p = 0.6 / (1 + e^0.1) = 0.28501..
    rr = RandomizedResponse(domain=["no", "yes"], epsilon=0.1, delta=0.4)
    assert rr.p <= 0.286
    assert rr.p == pytest.approx(0.6 / (1.0 + math.exp(0.1)), rel=1e-12)


@pytest.mark.parametrize("eps", [700.0, 800.0, 1e6])
def test_huge_epsilon_neither_overflows_nor_warns(eps: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rr = RandomizedResponse(domain=["a", "b", "c"], epsilon=eps, delta=1e-6)
        gamma = rr.gamma_lower_bound
        out = rr.release(np.array([0, 1, 2] * 100), SeededSource(2))
    expected_p = rr_p(2, eps, 1e-6)  # (1 - delta) / (m + e^eps), in log space
    # e^-eps is far below 2^-64: the least threshold (one word in 2^64) still flips,
    # shared by the m = 2 other values; more noise than asked for, never less
    assert rr.p == 2.0**-64 / 2
    assert rr.expected_error == 2.0**-64 > expected_p
    assert math.isfinite(gamma)
    assert gamma == pytest.approx(2.0 * expected_p, rel=1e-9, abs=1e-320)
    # P(any flip among 300) = 300 * 2^-64
    assert out.tolist() == [0, 1, 2] * 100


@pytest.mark.parametrize(
    "kwargs",
    [
        {"domain": ["a"], "epsilon": 1.0},
        {"domain": [], "epsilon": 1.0},
        {"domain": ["a", "b", "a"], "epsilon": 1.0},
        {"domain": ["a", "b"], "epsilon": 0.0},
        {"domain": ["a", "b"], "epsilon": -2.0},
        {"domain": ["a", "b"], "epsilon": 1.0, "delta": 1.0},
        {"domain": ["a", "b"], "epsilon": 1.0, "delta": -0.1},
    ],
)
def test_invalid_parameters_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(MechanismError):
        RandomizedResponse(**kwargs)  # type: ignore[arg-type]


def test_values_of_different_types_are_distinct_domain_values() -> None:
    rr = RandomizedResponse(domain=[1, "1"], epsilon=1.0)
    assert rr.m == 1


def test_release_of_empty_column() -> None:
    rr = RandomizedResponse(domain=["a", "b"], epsilon=1.0)
    assert rr.release(np.empty(0, dtype=np.int64), SeededSource(1)).shape == (0,)


# --- distribution: chi-square against the exact pmf -----------------------------------

N_DRAWS = 20_000
CHI2_ALPHA = 1e-4  # false-failure probability per chi-square test (over the choice of seed)


def _exact_pmf(size: int, true_index: int, eps: float, delta: float) -> np.ndarray:
    m = size - 1
    p = (1.0 - delta) / (m + math.exp(eps))
    pmf = np.full(size, p)
    pmf[true_index] = 1.0 - m * p
    return pmf


@pytest.mark.parametrize(
    ("size", "eps", "delta", "true_index", "seed"),
    [
        (2, math.log(3.0), 0.0, 0, 101),
        (2, math.log(3.0), 0.0, 1, 102),
        (2, 0.3, 0.2, 1, 103),
        (3, 1.0, 0.0, 0, 104),
        (3, 1.0, 0.0, 1, 105),
        (3, 0.2, 0.1, 2, 106),
        (48, 1.0, 1e-6, 0, 107),
        (48, 1.0, 1e-6, 23, 108),
        (48, 2.0, 0.0, 47, 109),
    ],
)
def test_output_frequencies_match_exact_pmf(
    size: int, eps: float, delta: float, true_index: int, seed: int
) -> None:
    rr = RandomizedResponse(domain=[f"v{i}" for i in range(size)], epsilon=eps, delta=delta)
    out = rr.release(np.full(N_DRAWS, true_index, dtype=np.int64), SeededSource(seed))
    assert out.min() >= 0
    assert out.max() <= size - 1
    counts = np.bincount(out, minlength=size)
    expected = N_DRAWS * _exact_pmf(size, true_index, eps, delta)
    assert expected.min() >= 5  # chi-square approximation is valid
    assert stats.chisquare(counts, expected).pvalue > CHI2_ALPHA


def test_mixed_column_is_handled_per_entry() -> None:
    # a column holding several true values: each group follows its own pmf
    size, eps = 3, 1.0
    rr = RandomizedResponse(domain=["TX", "CA", "NY"], epsilon=eps)
    truth = np.tile(np.arange(size, dtype=np.int64), N_DRAWS)
    out = rr.release(truth, SeededSource(110))
    for t in range(size):
        counts = np.bincount(out[truth == t], minlength=size)
        expected = N_DRAWS * _exact_pmf(size, t, eps, 0.0)
        # alpha = 1e-4 per group, 3e-4 for the test
        assert stats.chisquare(counts, expected).pvalue > CHI2_ALPHA


def test_chi_square_detects_a_wrong_pmf() -> None:
    # negative control: output at eps = 1 is rejected against the pmf for eps = 1.3
    rr = RandomizedResponse(domain=["a", "b", "c"], epsilon=1.0)
    out = rr.release(np.zeros(N_DRAWS, dtype=np.int64), SeededSource(111))
    counts = np.bincount(out, minlength=3)
    assert stats.chisquare(counts, N_DRAWS * _exact_pmf(3, 0, 1.3, 0.0)).pvalue < CHI2_ALPHA


class _Words:
    """Given first words (the flip decision), second words 0 (the first other value)."""

    def __init__(self, first: list[int]) -> None:
        self.first = np.array(first, dtype=np.uint64)

    def words(self, n: int, k: int) -> np.ndarray:
        assert (n, k) == (len(self.first), 2)
        return np.stack([self.first, np.zeros(n, dtype=np.uint64)], axis=1)

    def more_words(self, rows: np.ndarray, start: int, k: int) -> np.ndarray:
        raise AssertionError("randomized response reads two words a row")


def _ceil_threshold(p: float, m: int) -> int:
    """``ceil(m p 2^64)`` in integers, from the double's exact ratio (not ``Fraction``)."""
    numerator, denominator = p.as_integer_ratio()
    return -(-m * numerator * 2**64 // denominator)


def _flips(rr: RandomizedResponse, threshold: int) -> list[bool]:
    """Whether a true index 1 flips for the words just below and at ``threshold``."""
    source = _Words([threshold - 1, threshold])
    return (rr.release(np.array([1, 1], dtype=np.int64), source) != 1).tolist()


def test_the_flip_threshold_follows_p_when_it_changes_after_construction() -> None:
    """The threshold is cached by ``p``: an object whose ``p`` is set after it released
    (the audit's ``FixedFlipResponse``) flips with the new ``p``'s threshold, exactly."""
    rr = RandomizedResponse(domain=["a", "b", "c"], epsilon=1.0)
    calibrated = _ceil_threshold(rr.p, rr.m)
    assert _flips(rr, calibrated) == [True, False]
    rr.p = 0.286  # Example 4.5's p, above the calibrated one
    changed = _ceil_threshold(0.286, rr.m)
    assert changed > calibrated
    assert _flips(rr, changed) == [True, False]
    assert _flips(rr, calibrated) == [True, True]
    rr.p = math.nextafter(0.286, 0.0)  # the next double down: another key
    lower = _ceil_threshold(rr.p, rr.m)
    assert lower < changed
    assert _flips(rr, lower) == [True, False]


@pytest.mark.parametrize("same", [0.25, np.float64(0.25), np.float32(0.25), Fraction(1, 4)])
def test_equal_keys_of_the_threshold_cache_are_equal_thresholds(same: object) -> None:
    """The cache is keyed by value: every key equal to 0.25 (a double, numpy scalars, a
    Fraction) is the same exact number, so whichever came first, ``ceil(m 0.25 2^64)``."""
    from privstream.mechanisms.randomized_response import threshold_of

    threshold_of(0.25, 3)  # warm the cache with the plain double
    assert threshold_of(same, 3) == _ceil_threshold(0.25, 3) == 3 * 2**62
    # 0.0 and -0.0 are one key; both mean the smallest threshold, 1
    assert threshold_of(0.0, 3) == threshold_of(-0.0, 3) == 1
    # a neighbouring double is another key, another threshold
    assert threshold_of(math.nextafter(0.25, 1.0), 3) > 3 * 2**62

"""The samplers as implemented, exactly: thresholds, realised pmfs, realised privacy.

Nothing here trusts the code's own probability formulas. The discrete
Laplace thresholds are rebuilt from the documented construction with
80-digit ``decimal``; randomized response's flip threshold is found by
bisecting the *release* over a constant-word source. The realised pmfs are
then exact rationals (or 80-digit decimals), and the privacy loss is compared
with ``e^eps`` computed to 80 digits.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Context, Decimal
from fractions import Fraction

import numpy as np
import pytest
from numpy.typing import NDArray
from privstream.errors import MechanismError
from privstream.mechanisms import LaplaceMechanism, RandomizedResponse
from privstream.mechanisms.discrete_laplace import DiscreteLaplace, GeometricSampler
from privstream.mechanisms.gaussian import GaussianMechanism
from privstream.mechanisms.integer_laplace import IntegerLaplaceMechanism
from privstream.testing import SeededSource
from scipy import stats

TWO_64 = 1 << 64
CTX = Context(prec=80)


def exp80(x: float) -> Decimal:
    return CTX.exp(Decimal(x))


# --- discrete Laplace: the thresholds, rebuilt from the docstring ----------------------------


def reference_levels(t: float) -> tuple[int, list[list[int]]]:
    """``(T, [bounds of each digit level ..., bounds of the head])`` per the module docstring."""
    peel = 0
    while t / 2.0**peel > 2.0**12:
        peel += 12
    cells = max(1, math.ceil(4.0 * t / 2.0**peel))
    n = cells << peel
    tail = CTX.exp(CTX.divide(Decimal(-n), Decimal(t)))
    ext = max(1, int(CTX.multiply(tail, Decimal(TWO_64)).to_integral_value(ROUND_CEILING)))
    log_a = CTX.divide(CTX.ln(CTX.divide(Decimal(ext), Decimal(TWO_64))), Decimal(n))

    def thresholds(exponent: int, count: int, head: bool) -> list[int]:
        b = CTX.exp(CTX.multiply(log_a, Decimal(exponent)))
        top = Decimal(1) if head else 1 - CTX.power(b, count)
        out = [
            int(
                CTX.multiply(
                    CTX.divide(1 - CTX.power(b, j), top), Decimal(TWO_64)
                ).to_integral_value(ROUND_HALF_EVEN)
            )
            for j in range(1, count)
        ]
        return [*out, TWO_64 - ext] if head else out

    digits = [thresholds(1 << (12 * j), 4096, False) for j in range(peel // 12)]
    return ext, [*digits, thresholds(1 << peel, cells, True)]


@pytest.mark.parametrize("t", [0.05, 0.3, 2.5, 10.0, 1500.0, 5000.0, 3e7])
def test_thresholds_follow_the_documented_construction(t: float) -> None:
    sampler = GeometricSampler(t)
    ext, levels = reference_levels(t)
    assert sampler.extension == ext
    assert [level.bounds.tolist() for level in sampler.levels] == levels


@pytest.mark.parametrize("t", [0.3, 10.0, 1500.0, 5000.0, 3e7])
def test_word_lookup_counts_the_thresholds_at_or_below_the_word(t: float) -> None:
    sampler = GeometricSampler(t)
    rng = np.random.default_rng(7)
    for level in sampler.levels:
        bounds = level.bounds.tolist()
        near = [b + d for b in bounds[:: max(1, len(bounds) // 500)] for d in (-1, 0, 1)]
        probes = [0, TWO_64 - 1, *near, *rng.integers(0, TWO_64, 5000, dtype=np.uint64).tolist()]
        words = np.array([w for w in probes if 0 <= w < TWO_64], dtype=np.uint64)
        expected = [bisect.bisect_right(bounds, int(w)) for w in words.tolist()]
        assert level.values(words).tolist() == expected


# --- the realised pmf of Z and its privacy loss ---------------------------------------------


def realised_geometric(t: float, length: int) -> list[Decimal]:
    """``P(G = k)``, ``k < length``, of a one-level sampler, from the reference thresholds."""
    ext, levels = reference_levels(t)
    assert len(levels) == 1, "exact convolutions here are for one-level samplers"
    edges = [0, *levels[0]]
    cells = [Decimal(edges[j + 1] - edges[j]) / TWO_64 for j in range(len(edges) - 1)]
    extend = Decimal(ext) / TWO_64
    k = len(cells)
    return [CTX.multiply(CTX.power(extend, i // k), cells[i % k]) for i in range(length)]


def realised_difference(t: float, reach: int) -> dict[int, Decimal]:
    """``P(G1 - G2 = z)`` for ``|z| <= reach``, summing ``G`` up to where its tail is < e^-150."""
    ext, levels = reference_levels(t)
    extend = ext / TWO_64
    rounds = math.ceil(150.0 / -math.log(extend)) + 1
    length = rounds * len(levels[0]) + reach + 1
    q = realised_geometric(t, length)
    return {
        z: sum(
            (CTX.multiply(q[k + z], q[k]) for k in range(max(0, -z), length - max(z, 0))),
            Decimal(0),
        )
        for z in range(-reach, reach + 1)
    }


def worst_ratio(pmf: dict[int, Decimal], shift: int) -> Decimal:
    """``max_z p(z) / p(z - shift)`` over the computed window."""
    return max(pmf[z] / pmf[z - shift] for z in pmf if z - shift in pmf)


# (integer bounds width, epsilon): t = width / epsilon (up to 1e-11)
PURE_INTEGER = [(10, 1.0), (5, 2.0), (3, 0.7), (1, 0.5), (10, 50.0), (10, 200.0), (1, 30.0)]


@pytest.mark.parametrize(("width", "eps"), PURE_INTEGER)
def test_realised_privacy_loss_of_integer_laplace_is_at_most_epsilon(
    width: int, eps: float
) -> None:
    mech = IntegerLaplaceMechanism(bounds=(0, width), epsilon=eps)
    assert mech.noise is not None
    t = mech.noise.t
    cells = len(reference_levels(t)[1][0])
    # Z's pmf is periodic in the ratio beyond one head block: P(Z = z + K) = P(ext) P(Z = z)
    # for z >= 0 (and mirrored), so |z| <= K + 2 width covers every ratio
    pmf = realised_difference(t, cells + 2 * width + 2)
    ratio = worst_ratio(pmf, width)
    assert ratio <= exp80(eps)
    assert worst_ratio(pmf, -width) <= exp80(eps)  # the other neighbour
    # and it is tight: the calibration gives up ~1e-11 of epsilon, and rounding the
    # extension probability up to a whole word costs ln(1 + 1/T) per unit of sensitivity
    ext = reference_levels(t)[0]
    assert float(CTX.ln(ratio)) >= eps * (1.0 - 1e-9) - width / ext


def test_huge_epsilon_is_realised_below_the_declared_one() -> None:
    # e^-(1000/10) per step is below 2^-64: the least threshold (one word) extends,
    # the pmf is exactly geometric with ratio 2^-64, realised epsilon 10 * 64 ln 2
    mech = IntegerLaplaceMechanism(bounds=(0, 10), epsilon=1000.0)
    assert mech.noise is not None
    assert GeometricSampler(mech.noise.t).extension == 1
    pmf = realised_difference(mech.noise.t, 24)
    assert float(CTX.ln(worst_ratio(pmf, 10))) == pytest.approx(640 * math.log(2.0), rel=1e-12)


class ScriptedSource:
    """First words from a fixed array; every extension word from a second value."""

    def __init__(self, first: NDArray[np.uint64], more: int) -> None:
        self.first, self.more = first, more

    def words(self, n: int, k: int) -> NDArray[np.uint64]:
        assert self.first.shape == (n, k)
        return self.first

    def more_words(self, rows: NDArray[np.int64], start: int, k: int) -> NDArray[np.uint64]:
        # round r (start = 2 + 2 (r - 1)) extends while r < the scripted count
        rounds = (start - 2) // 2 + 1
        word = TWO_64 - 1 if rounds < self.more else 0
        return np.full((len(rows), k), word, dtype=np.uint64)


@pytest.mark.parametrize("extensions", [0, 1, 8, 100])
def test_support_is_unbounded_at_large_epsilon(extensions: int) -> None:
    # the red team's case: integers [0, 10] at epsilon 50, input 0 never exceeded 7.
    # Top words extend the head (one cell at t = 0.2): G1 = the number of extensions
    mech = IntegerLaplaceMechanism(bounds=(0, 10), epsilon=50.0)
    first = np.array([[TWO_64 - 1 if extensions else 0, 0]], dtype=np.uint64)
    out = mech.release(np.array([0]), ScriptedSource(first, extensions))
    assert out.tolist() == [extensions]


@pytest.mark.parametrize(("t", "seed"), [(5000.0, 201), (3e7, 202), (2.0**40, 203)])
def test_multi_level_samplers_follow_the_pmf(t: float, seed: int) -> None:
    # chi-square of |Z| in 40 equiprobable bins of the ideal discrete Laplace at t
    # (bins that wide make the sampler's 1e-14 relative error invisible);
    # alpha = 1e-4: false-failure probability 1e-4 per case
    n = 40_000
    z = np.abs(DiscreteLaplace(t).sample(SeededSource(seed), n).astype(np.float64))
    # |Z| is geometric-like with P(|Z| >= k) = 2 a^k / (1 + a) for k >= 1
    a = math.exp(-1.0 / t)
    probs = np.linspace(0.0, 1.0, 41)[1:-1]
    edges = np.ceil(np.log((1.0 - probs) * (1.0 + a) / 2.0) / math.log(a))
    observed = np.bincount(np.searchsorted(edges, z, side="right"), minlength=40)
    survival = np.concatenate([[1.0], 2.0 * a**edges / (1.0 + a), [0.0]])
    expected = n * (survival[:-1] - survival[1:])
    assert stats.chisquare(observed, expected).pvalue > 1e-4


# --- randomized response: the threshold, found through the release ----------------------


class ConstantWords:
    def __init__(self, first: int, second: int) -> None:
        self.pair = (first, second)

    def words(self, n: int, k: int) -> NDArray[np.uint64]:
        return np.tile(np.array(self.pair, dtype=np.uint64), (n, 1))

    def more_words(self, rows: NDArray[np.int64], start: int, k: int) -> NDArray[np.uint64]:
        raise AssertionError("randomized response reads two words")


def observed_threshold(rr: RandomizedResponse) -> int:
    """The least first word that keeps the true answer, by bisection over the release."""
    lo, hi = 0, TWO_64 - 1  # release(lo) flips (checked), release(hi) keeps
    truth = np.array([0])
    assert rr.release(truth, ConstantWords(0, 0)).tolist() != [0]
    assert rr.release(truth, ConstantWords(hi, 0)).tolist() == [0]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if rr.release(truth, ConstantWords(mid, 0)).tolist() == [0]:
            hi = mid
        else:
            lo = mid
    return hi


def observed_pick(rr: RandomizedResponse, word: int) -> int:
    """Which other value a flip reports (index among the others) for second word ``word``."""
    out = int(rr.release(np.array([0]), ConstantWords(0, word))[0])
    return out - 1  # the true value 0 is skipped


def exact_rr_pmf(threshold: int, m: int) -> list[list[Fraction]]:
    """``P(y | d)`` from the observed threshold and ``w mod m`` (checked below)."""
    flip = Fraction(threshold, TWO_64)
    counts = [TWO_64 // m + (1 if j < TWO_64 % m else 0) for j in range(m)]
    table = []
    for d in range(m + 1):
        row = []
        for y in range(m + 1):
            if y == d:
                row.append(1 - flip)
            else:
                row.append(flip * Fraction(counts[y if y < d else y - 1], TWO_64))
        table.append(row)
    return table


def exact_hockey_stick(table: Sequence[Sequence[Fraction]], e: Fraction) -> Fraction:
    return max(
        sum((max(Fraction(0), p - e * q) for p, q in zip(a, b, strict=True)), Fraction(0))
        for a in table
        for b in table
        if a is not b
    )


RR_CASES = [
    (1, math.log(3.0), 0.0),
    (3, 1.0, 0.0),
    (3, 0.1, 0.4),
    (47, 2.0, 1e-6),
    (1, 37.0, 0.0),
    (1, 50.0, 0.0),
    (3, 50.0, 0.0),
    (2, 1e6, 0.0),
]


@pytest.mark.parametrize(("m", "eps", "delta"), RR_CASES)
def test_randomized_response_realises_its_claim_exactly(m: int, eps: float, delta: float) -> None:
    rr = RandomizedResponse(domain=list(range(m + 1)), epsilon=eps, delta=delta)
    threshold = observed_threshold(rr)
    assert threshold >= 1  # every answer can flip: never released verbatim
    assert rr.p * m == pytest.approx(threshold / TWO_64, rel=2**-50)  # reported = sampled
    # the pick among the others is w mod m
    for word in (0, 1, m - 1, m, TWO_64 - 1, 12345678901234567):
        assert observed_pick(rr, word) == word % m
    table = exact_rr_pmf(threshold, m)
    # e^eps from below to 80 digits (capped: e^700 is far beyond a 2^-64 resolution)
    e = Fraction(exp80(min(eps, 700.0))) * (1 - Fraction(1, 10**70))
    assert exact_hockey_stick(table, e) <= Fraction(delta)


def test_boolean_at_epsilon_50_flips_one_word_in_2_to_the_64() -> None:
    rr = RandomizedResponse(domain=[False, True], epsilon=50.0)
    assert observed_threshold(rr) == 1
    # realised epsilon ln(2^64 - 1) ~ 44.36 < 50: more noise than asked, never less
    table = exact_rr_pmf(1, 1)
    assert table[0][0] / table[1][0] == TWO_64 - 1


# --- non-finite input ---------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_every_numeric_release_refuses_non_finite_values(bad: float) -> None:
    column = np.array([1.0, bad])
    mechanisms = [
        LaplaceMechanism(bounds=(0.0, 10.0), epsilon=1.0),
        GaussianMechanism(bounds=(0.0, 10.0), epsilon=1.0, delta=1e-6),
        IntegerLaplaceMechanism(bounds=(0, 10), epsilon=1.0),
        RandomizedResponse(domain=["a", "b"], epsilon=1.0),
    ]
    for mech in mechanisms:
        with pytest.raises(MechanismError):
            mech.release(column, SeededSource(1))


def test_tiny_epsilon_on_a_real_field_is_calibrated_not_refused() -> None:
    # eps 1e-6 on [0, 100]: the grid is capped at 100/2 -> 32, three grid steps of sensitivity
    mech = LaplaceMechanism(bounds=(0.0, 100.0), epsilon=1e-6)
    assert mech.granularity == 32.0
    assert mech.grid_sensitivity == 3
    assert mech.scale == pytest.approx(100.0 / 1e-6, rel=0.05)

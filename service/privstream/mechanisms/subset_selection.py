"""Subset Selection (SS) for categorical fields: release ``d`` of the ``k`` domain values.

Claim: pure ``eps``-DP (``delta = 0``) for any two values of a ``k``-value
domain, for the law actually sampled: every output's probability ratio
between two inputs is at most ``E <= e^eps`` (exact rationals).

Release (Wang et al. 2016; Ye & Barg 2018): with probability ``p`` the true
value and ``d - 1`` of the other ``k - 1`` values, else ``d`` of the others;
ideally ``p = d e^eps / (d e^eps + k - d)``. ``d`` minimises the summed
frequency-vector variance at ``eps`` (``optimal_subset_size``); the output is
the ``d`` values in canonical order (``privstream.kinds.subset``).

Calibration: ``T``, the largest integer with ``(T / 2^64) A <= E (1 - T / 2^64) B``
(``A``, ``B``: rational bounds on the realised pick laws, ``pick_spread``);
construction checks all four ratio cases in integers (``certify``).

Sampler contract: ``d + 1`` 64-bit words per record, one ``words`` call:
include the true value iff ``w0 < T``; ``w_(1+i) mod (k - 1 - i)`` is step
``i`` of a Fisher-Yates shuffle of the other values (the ``d``-th pick is
unused when the true value is included). Integers only.

Error: Hamming distance between one-hot and released subset, ``d + 1 - 2p``;
lower bound Theorem 5.5 with ``kappa = 1``. Frequencies: ``(c/n - q) / (p - q)``.

Proof, step by step, with the function each step proves:
docs/proofs/subset-selection.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.base import (
    TWO_64,
    FiniteMechanism,
    exp_lower_bound,
    exp_neg,
    finite_gamma,
)
from privstream.mechanisms.rng import NoiseSource
from privstream.mechanisms.validation import check_domain, check_epsilon

#: the most domain values (as unary encoding's universe): the shuffle touches ``k - 1``
#: cells a record, about 0.4 s a record at k = 400,000
MAX_DOMAIN = 2**17
#: shuffle rows held at once: rows x (k - 1) cells of int32
_SHUFFLE_CELLS = 1 << 22


def ideal_probabilities(k: int, d: int, epsilon: float) -> tuple[float, float]:
    """``(p, q)`` of the ideal law: ``P(v in S | v)`` and ``P(v in S | u != v)``."""
    p = d / (d + (k - d) * exp_neg(epsilon))
    m = k - 1
    return p, p * (d - 1) / m + (1.0 - p) * d / m


def value_variance(p: float, q: float, n: int, frequency: float) -> float:
    """Exact ``Var[f_hat]`` of one value held by a share ``frequency`` (given the data)."""
    spread = frequency * p * (1.0 - p) + (1.0 - frequency) * q * (1.0 - q)
    return spread / (n * (p - q) ** 2)


def optimal_subset_size(k: int, epsilon: float) -> int:
    """The ``d`` in ``1..k-1`` with the least summed variance ``A + (k - 1) B`` (ties: smaller).

    A function of ``k`` and ``epsilon`` only, never of data.
    """
    if k < 2:
        raise MechanismError(f"subset selection needs at least 2 domain values, got {k}")
    d = np.arange(1, k, dtype=np.float64)
    p = d / (d + (k - d) * exp_neg(epsilon))
    q = p * (d - 1) / (k - 1) + (1.0 - p) * d / (k - 1)
    with np.errstate(divide="ignore", invalid="ignore"):  # p == q in doubles at a tiny epsilon
        summed = (p * (1 - p) + (k - 1) * q * (1 - q)) / (p - q) ** 2
    return int(np.argmin(np.where(p > q, summed, np.inf))) + 1


def pick_weights(size: int) -> tuple[int, int]:
    """Words (of ``2^64``) that give the least and the most likely ``w mod size``."""
    low = TWO_64 // size
    return low, low + (1 if TWO_64 % size else 0)


#: ``pick_spread`` is a rational over this power of two, rounded up at every step
SPREAD_SCALE = 1 << 128


@functools.lru_cache(maxsize=64)
def pick_spread(others: int, picks: int) -> int:
    """``rho * 2^128`` rounded up: an upper bound on ``prod_(i < picks) hi_i / lo_i``.

    Step ``i`` picks ``w mod (others - i)``, whose likeliest and least likely
    residues have ``hi_i`` and ``lo_i`` words (``pick_weights``). Each ordering of
    a ``picks``-subset is one draw vector, so every subset's probability lies in
    ``[picks! prod lo_i, picks! prod hi_i] / 2^(64 picks)``: their ratio is ``rho``.
    """
    spread = SPREAD_SCALE
    for i in range(picks):
        low, high = pick_weights(others - i)
        if high != low:
            spread = -(-spread * high // low)  # rounded up
    return spread


def include_threshold(k: int, d: int, epsilon: float) -> int:
    """The largest ``T`` with ``(T / 2^64) A <= E (1 - T / 2^64) B`` (``E <= e^eps`` rational).

    ``A = max U_(d-1)``, ``B = min U_d`` over subsets of the ``k - 1`` others:
    ``A / B = rho_(d-1) 2^64 / (d lo_(d-1))`` (``pick_spread``, proof page step 3).
    """
    r_num = pick_spread(k - 1, d - 1) * TWO_64
    r_den = SPREAD_SCALE * d * pick_weights(k - d)[0]
    e = exp_lower_bound(epsilon)
    threshold = (e.numerator * TWO_64 * r_den) // (r_num * e.denominator + e.numerator * r_den)
    return min(threshold, TWO_64 - 1)


def certify(k: int, d: int, threshold: int, epsilon: float) -> bool:
    """Whether every output's ratio between two inputs is at most ``E <= e^eps``.

    Integer arithmetic on the four cases of an output ``S`` and inputs
    ``v != v'``: ``v in S, v' not``; ``v' in S, v not``; both in ``S``;
    neither (proof page, step 4), each bounded above through ``pick_spread``.
    """
    spread_a, spread_b = pick_spread(k - 1, d - 1), pick_spread(k - 1, d)
    low, high = pick_weights(k - d)  # the d-th step's residues
    e = exp_lower_bound(epsilon)
    keep, drop = threshold, TWO_64 - threshold
    # each case as (numerator, denominator) of its largest ratio
    cases = (
        (keep * spread_a * TWO_64, drop * d * low * SPREAD_SCALE),
        (drop * d * high * spread_a, keep * TWO_64 * SPREAD_SCALE),
        (spread_a, SPREAD_SCALE),
        (spread_b, SPREAD_SCALE),
    )
    return all(num * e.denominator <= e.numerator * den for num, den in cases)


class SubsetSelection(FiniteMechanism):
    """SS over a finite domain: domain positions in, ``(n, d)`` sorted positions out."""

    name: ClassVar[str] = "subset_selection"
    metric: ClassVar[str] = "Hamming distance between one-hot and released subset vectors"

    def __init__(self, *, domain: Sequence[Any], epsilon: float) -> None:
        super().__init__(epsilon=check_epsilon(epsilon), delta=0.0)
        self.domain = check_domain(domain)
        k = len(self.domain)
        if k > MAX_DOMAIN:
            raise MechanismError(
                f"subset selection over {k} values; at most {MAX_DOMAIN} are supported (its "
                "shuffle costs a cell per value per record): use local_hashing"
            )
        self.subset_size = optimal_subset_size(k, self.epsilon)
        self.threshold = include_threshold(k, self.subset_size, self.epsilon)
        if self.threshold < 1 or not certify(k, self.subset_size, self.threshold, self.epsilon):
            raise MechanismError(
                f"subset selection at epsilon {self.epsilon:.3g} over {k} values is not "
                "certified by 64-bit thresholds; use a larger epsilon"
            )
        d, m = self.subset_size, k - 1
        #: realised ``P(v in S | v)`` and the ideal-pick ``P(v in S | u != v)``
        self.p = self.threshold / TWO_64
        self.q = self.p * (d - 1) / m + (1.0 - self.p) * d / m

    @property
    def words_per_value(self) -> int:
        return self.subset_size + 1

    @property
    def expected_error(self) -> float:
        return self.subset_size + 1.0 - 2.0 * self.p

    @property
    def gamma_lower_bound(self) -> float:
        """Theorem 5.5 with ``kappa = 1`` over the ``k`` one-hot vectors (as for OUE)."""
        return finite_gamma(len(self.domain) - 1, self.epsilon, self.delta)

    def frequency_variance(self, n: int, frequency: float) -> float:
        """Exact ``Var[f_hat_v]`` given the data, for a value held by a share ``frequency``."""
        if n < 1:
            raise MechanismError(f"the estimator needs at least one record, got n = {n}")
        return value_variance(self.p, self.q, n, frequency)

    def estimator_variance(self, n: int) -> float:
        # linear in f: the worst case is at f = 0 or f = 1
        return max(self.frequency_variance(n, 0.0), self.frequency_variance(n, 1.0))

    def params(self) -> dict[str, float | int | str]:
        return {
            "subset_size": self.subset_size,
            "p": self.p,
            "q": self.q,
            "domain_size": len(self.domain),
        }

    def release(self, values: NDArray[Any], source: NoiseSource) -> NDArray[np.int64]:
        """The released subsets of a column of domain positions: ``(n, d)``, rows ascending."""
        k = len(self.domain)
        indices = np.asarray(values)
        if indices.ndim != 1 or (
            len(indices)
            and (indices.dtype.kind not in "iu" or indices.min() < 0 or indices.max() >= k)
        ):
            raise MechanismError(
                f"{self.name}: expected a column of domain positions in 0..{k - 1}"
            )
        indices = indices.astype(np.int64)
        words = source.words(len(indices), self.words_per_value)
        picks = shuffle_picks(words[:, 1:], k - 1)
        picks += picks >= indices[:, None]  # skip over the true value
        include = words[:, 0] < np.uint64(self.threshold)
        picks[include, -1] = indices[include]  # the true value replaces the d-th pick
        picks.sort(axis=1)
        return picks

    def noise_error(
        self, inputs: NDArray[Any], outputs: NDArray[Any]
    ) -> NDArray[np.float64] | None:
        """Hamming distance to the one-hot: ``d - 1`` if it is released, else ``d + 1``."""
        indices = np.asarray(inputs, dtype=np.int64)
        held = (np.asarray(outputs) == indices[:, None]).any(axis=1)
        errors: NDArray[np.float64] = np.where(held, self.subset_size - 1.0, self.subset_size + 1.0)
        return errors


def shuffle_picks(words: NDArray[np.uint64], others: int) -> NDArray[np.int64]:
    """The first ``words.shape[1]`` picks of a Fisher-Yates shuffle of ``0..others-1`` per row.

    Step ``i`` swaps position ``i`` with ``i + (w_i mod (others - i))``: a
    bijection between draw vectors and ordered picks (proof page, step 2).
    """
    n, picks = words.shape
    out = np.empty((n, picks), dtype=np.int64)
    rows_at_once = max(1, _SHUFFLE_CELLS // others)
    for start in range(0, n, rows_at_once):
        chunk = words[start : start + rows_at_once]
        rows = np.arange(len(chunk))
        order = np.tile(np.arange(others, dtype=np.int32), (len(chunk), 1))
        for i in range(picks):
            j = i + (chunk[:, i] % np.uint64(others - i)).astype(np.int64)
            picked = order[rows, j]
            order[rows, j] = order[:, i]
            order[:, i] = picked
        out[start : start + len(chunk)] = order[:, :picks]
    return out


def estimate_frequencies(
    counts: Sequence[int] | NDArray[np.int64], records: int, mechanism: SubsetSelection
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Debiased share of each domain value, and its standard error.

    ``counts[j]`` is how many of ``records`` released subsets hold
    ``domain[j]``. ``E[c/n] = q + f (p - q)``, so ``f_hat = (c/n - q) / (p - q)``
    is unbiased; the standard error is ``frequency_variance`` at ``f_hat``
    clipped to [0, 1]. Estimates are not clipped (clipping would bias them).
    """
    arr = np.asarray(counts, dtype=np.float64)
    if arr.shape != (len(mechanism.domain),) or records < 1:
        raise MechanismError(
            f"expected {len(mechanism.domain)} counts and at least one record, got "
            f"{arr.shape} and {records}"
        )
    p, q = mechanism.p, mechanism.q
    estimates: NDArray[np.float64] = (arr / records - q) / (p - q)
    f = np.clip(estimates, 0.0, 1.0)
    stderr: NDArray[np.float64] = np.sqrt(f * p * (1 - p) + (1 - f) * q * (1 - q)) / (
        math.sqrt(records) * (p - q)
    )
    return estimates, stderr

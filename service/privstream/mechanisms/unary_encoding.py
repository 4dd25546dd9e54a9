"""Unary encoding for set-valued fields (a user's hobbies out of a fixed universe).

Claim: pure ``eps``-DP (``delta = 0``) for any two sets of at most
``k = max_items`` items of a universe of ``d``, for the thresholds actually
used (``realized_epsilon <= epsilon``); a batch holding a larger set is refused.

Release: the indicator vector ``b in {0,1}^d``, every bit flipped
independently with ``P(1 -> 1) = p``, ``P(0 -> 1) = q``: ``optimized`` (OUE,
Wang et al. 2017) or ``symmetric`` (RAPPOR's one-time RR).

Calibration: ``(p, q)`` from ``privstream.mechanisms.unary_calibration``; the
realised pair ``(T1, T0) / 2^64`` is certified: its whole-set cost
``a alpha + b beta`` with 60-digit ``decimal`` log upper bounds must be
``<= epsilon`` (recalibrating at ``eps (1 - 2^-44 4^j)``), ``T1 <= T0`` refused.

Sampler contract: one 64-bit word per bit, ``(n, d)`` words in one ``words``
call, the bit is ``w < T1`` (true) or ``w < T0`` (false); ``d <= 2**17``.

Error ``|S| (1 - p) + (d - |S|) q``; lower bound the larger of Theorems 5.3
and 5.5; the analyst side is ``privstream.mechanisms.unary_estimation``.

Proof, step by step, with the function each step proves:
docs/proofs/unary-encoding.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.base import Mechanism, compact_gamma, log_upper_bound
from privstream.mechanisms.rng import NoiseSource
from privstream.mechanisms.unary_calibration import (
    VARIANTS,
    Variant,
    ceil_to_words,
    floor_to_words,
    set_cost,
    set_epsilon,
    symmetric_false_threshold,
    unary_calibration,
    unary_probabilities,
    worst_case_differences,
)
from privstream.mechanisms.unary_estimation import (
    estimate_item_frequencies,
    estimate_item_frequencies_from_counts,
)
from privstream.mechanisms.validation import check_domain, check_epsilon

__all__ = [
    "MAX_UNIVERSE",
    "VARIANTS",
    "UnaryEncoding",
    "Variant",
    "estimate_item_frequencies",
    "estimate_item_frequencies_from_counts",
    "set_epsilon",
    "unary_probabilities",
    "worst_case_differences",
]

#: the keyed noise source serves at most 2**17 words per record and field
MAX_UNIVERSE = 2**17

_TWO_64 = 2**64


def _log_admissible_sets(universe_size: int, max_items: int) -> float:
    """``ln sum_{i <= min(k, d)} C(d, i)`` via log-sum-exp of ``lgamma`` terms."""
    d = universe_size
    terms = np.array(
        [
            math.lgamma(d + 1) - math.lgamma(i + 1) - math.lgamma(d - i + 1)
            for i in range(min(max_items, d) + 1)
        ]
    )
    top = float(terms.max())
    return top + math.log(float(np.exp(terms - top).sum()))


class UnaryEncoding(Mechanism):
    """Bit-vector encoding of a set, every bit flipped independently (OUE or symmetric)."""

    name: ClassVar[str] = "unary_encoding"
    metric: ClassVar[str] = "Hamming distance between bit vectors"

    def __init__(
        self,
        *,
        universe: Sequence[str],
        max_items: int,
        epsilon: float,
        variant: Variant = "optimized",
    ) -> None:
        super().__init__(epsilon=check_epsilon(epsilon), delta=0.0)
        self.universe: tuple[str, ...] = check_domain(universe)
        for position, item in enumerate(self.universe):
            if not isinstance(item, str):
                raise MechanismError(
                    f"universe item at position {position} is a {type(item).__name__}, not a str"
                )
        if len(self.universe) > MAX_UNIVERSE:
            raise MechanismError(
                f"universe has {len(self.universe)} items; at most {MAX_UNIVERSE} are supported"
            )
        if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1:
            raise MechanismError(f"max_items {max_items!r} must be an integer >= 1")
        if variant not in VARIANTS:
            raise MechanismError(f"variant {variant!r} is not one of {', '.join(VARIANTS)}")
        self.variant: Variant = variant
        self.max_items = max_items
        self.universe_size = len(self.universe)
        self._index = {item: j for j, item in enumerate(self.universe)}
        t1, t0, self.item_epsilon = self._thresholds()
        self._t1, self._t0 = np.uint64(t1), np.uint64(t0)
        #: the realised P(1 -> 1) and P(0 -> 1), ``T / 2**64``
        self.p, self.q = t1 / _TWO_64, t0 / _TWO_64

    def _thresholds(self) -> tuple[int, int, float]:
        """``(T1, T0, item_epsilon)`` whose certified set epsilon is ``<= epsilon``."""
        for attempt in range(8):
            target = self.epsilon * (1.0 - 2.0**-44 * 4.0**attempt) if attempt else self.epsilon
            p, q, item = unary_calibration(self.universe_size, self.max_items, target, self.variant)
            if self.variant == "symmetric":  # 1 - p = q: T1 = 2^64 - T0, T0 from decimal
                t0 = symmetric_false_threshold(item / 2.0)
                t1 = _TWO_64 - t0
            else:
                t1, t0 = floor_to_words(p), ceil_to_words(q)
            if t1 <= t0:
                raise MechanismError(
                    f"epsilon {self.epsilon:.3g} is too small for 64-bit bit-flip thresholds "
                    f"over {self.universe_size} items (P(1 -> 1) and P(0 -> 1) meet); "
                    "raise epsilon"
                )
            if self._certified_epsilon(t1, t0) <= self.epsilon:
                return t1, t0, item
        raise MechanismError(  # pragma: no cover -- the first or second attempt certifies
            f"unary encoding at epsilon {self.epsilon:.6g}: no 64-bit thresholds certified"
        )

    def _certified_epsilon(self, t1: int, t0: int) -> float:
        alpha = log_upper_bound(Fraction(t1, t0))
        beta = log_upper_bound(Fraction(_TWO_64 - t0, _TWO_64 - t1))
        cost = set_cost(alpha, beta, self.universe_size, self.max_items)
        return cost * (1.0 + 2.0**-50)

    @property
    def realized_epsilon(self) -> float:
        """Upper bound on the whole-set eps of the thresholds actually used (``<= epsilon``)."""
        return self._certified_epsilon(int(self._t1), int(self._t0))

    @property
    def expected_error(self) -> float:
        d = self.universe_size
        s = min(self.max_items, d) if 1.0 - self.p >= self.q else 0
        return s * (1.0 - self.p) + (d - s) * self.q

    @property
    def diameter(self) -> int:
        """Largest Hamming distance between two admissible sets: ``min(2k, d)``."""
        return min(2 * self.max_items, self.universe_size)

    @property
    def gamma_diameter_bound(self) -> float:
        """Theorem 5.3: ``(1 - delta) diam / (2 (1 + e^eps))``."""
        return compact_gamma(self.diameter, self.epsilon, self.delta)

    @property
    def gamma_discrete_bound(self) -> float:
        """Theorem 5.5, ``kappa = 1``: ``(1 - delta) m / (m + e^eps)``, m + 1 admissible sets."""
        log_total = _log_admissible_sets(self.universe_size, self.max_items)
        log_m = log_total + math.log1p(-math.exp(-log_total))
        x = self.epsilon - log_m  # m / (m + e^eps) = 1 / (1 + e^x), computed without overflow
        share = math.exp(-x) / (1.0 + math.exp(-x)) if x > 0 else 1.0 / (1.0 + math.exp(x))
        return (1.0 - self.delta) * share

    @property
    def gamma_lower_bound(self) -> float:
        return max(self.gamma_diameter_bound, self.gamma_discrete_bound)

    def frequency_variance(self, n: int, frequency: float) -> float:
        """Exact ``Var[f_hat_j]`` given the data, for an item held by a share ``frequency``."""
        if n < 1:
            raise MechanismError(f"the estimator needs at least one record, got n = {n}")
        p, q = self.p, self.q
        spread = frequency * p * (1.0 - p) + (1.0 - frequency) * q * (1.0 - q)
        return spread / (n * (p - q) ** 2)

    def estimator_variance(self, n: int) -> float:
        # linear in f: the worst case is at f = 0 or f = 1
        return max(self.frequency_variance(n, 0.0), self.frequency_variance(n, 1.0))

    def params(self) -> dict[str, float | int | str]:
        return {
            "variant": self.variant,
            "p": self.p,
            "q": self.q,
            "item_epsilon": self.item_epsilon,
            "universe_size": self.universe_size,
            "max_items": self.max_items,
        }

    def encode(self, sets: Iterable[Iterable[str]]) -> NDArray[np.bool_]:
        """Bit vectors of the given sets; refuses unknown items and oversized sets.

        Errors name the record's position, never an item (items are raw data).
        """
        rows: list[list[int]] = []
        for position, items in enumerate(sets):
            try:
                row = sorted({self._index[item] for item in items})
            except (KeyError, TypeError):
                raise MechanismError(
                    f"set at position {position} holds an item outside the universe"
                ) from None
            if len(row) > self.max_items:
                raise MechanismError(
                    f"set at position {position} holds {len(row)} items; "
                    f"at most {self.max_items} are allowed"
                )
            rows.append(row)
        bits = np.zeros((len(rows), self.universe_size), dtype=np.bool_)
        for i, row in enumerate(rows):
            bits[i, row] = True
        return bits

    def release(self, bits: NDArray[np.bool_], source: NoiseSource) -> NDArray[np.bool_]:
        """Sanitize an ``(n, |U|)`` bool array of encoded sets into one of the same shape."""
        arr = np.asarray(bits)
        if arr.ndim != 2 or arr.shape[1] != self.universe_size or arr.dtype != np.bool_:
            raise MechanismError(
                f"expected an (n, {self.universe_size}) bool array, "
                f"got shape {arr.shape} of {arr.dtype}"
            )
        oversized = int(np.count_nonzero(arr.sum(axis=1) > self.max_items))
        if oversized:
            raise MechanismError(
                f"{oversized} set(s) hold more than max_items = {self.max_items} items; "
                "the guarantee does not cover them"
            )
        words = source.words(arr.shape[0], self.universe_size)
        return np.where(arr, words < self._t1, words < self._t0)

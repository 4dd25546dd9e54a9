r"""Unary encoding for set-valued fields (a user's hobbies out of a fixed universe).

A record is a set ``S`` of at most ``k = max_items`` items of a universe
``U`` (``|U| = d``), encoded as a bit vector ``b in {0,1}^d`` with
``b_j = [j in S]``. Every bit is flipped independently::

    P(out_j = 1 | b_j = 1) = p          P(out_j = 1 | b_j = 0) = q

* ``optimized`` (OUE, Wang et al. 2017): ``p = 1/2``, ``q = 1/(e^e1 + 1)``.
* ``symmetric`` (RAPPOR's one-time randomized response, Erlingsson et al.
  2014): ``p = e^c / (e^c + 1)``, ``q = 1 - p``.

with the per-bit parameters ``e1`` and ``c`` calibrated below so that the
*whole set* is eps-DP (pure, ``delta = 0``). The caller guarantees
``|S| <= k`` (``release`` refuses a batch holding a larger set: the
guarantee would not hold for it).

The calibration (``p``, ``q`` from epsilon, and its derivation) is in
``privstream.mechanisms.unary_calibration``; the analyst side in
``privstream.mechanisms.unary_estimation``.

Sampling: one 64-bit word per bit; the output bit is ``w < T`` with
``T1 = floor(p 2**64)`` for a true bit and ``T0 = ceil(q 2**64)`` for a false
one (``T0 >= 1``), so the realised pair is exactly ``(T1, T0) / 2**64``. Its
whole-set epsilon (``realized_epsilon``) is the cost ``a alpha + b beta`` of
``unary_calibration`` with
``alpha = ln(T1/T0)``, ``beta = ln((2^64 - T0)/(2^64 - T1))``, evaluated as
an upper bound (60-digit ``decimal`` logs, ``base.log_upper_bound``;
``a max + b min`` of upper bounds bounds the true ``a alpha + b beta`` for
``a >= b``). Symmetric takes ``T0 = ceil(2^64 / (1 + e^c))`` from 60-digit
``decimal`` and ``T1 = 2^64 - T0`` (``1 - p = q`` exactly: a double ``p``
loses ``1 - p`` once ``q < 2^-53``, a double ``q`` loses ``alpha`` at tiny
``c``). Construction requires
the bound to be ``<= epsilon``, recalibrating at ``eps (1 - 2^-44 4^j)`` if
the doubles ``p, q`` rounded the wrong way, and
refuses ``T1 <= T0`` (an epsilon so small that ``p`` and ``q`` meet at
``2**-64``). At a large epsilon ``T0 = 1`` caps ``alpha`` at ``ln(2^63)``:
the realised epsilon is then below the declared one, never above. ``p`` and
``q`` report the realised pair. The draw is ``(n, d)`` words (8 bytes per bit per record), and the
universe is limited to ``2**17`` items (the keyed source's per-record limit).

Alternative not taken: *padding and sampling* (Qin et al. 2016, Wang et al.
2018) pads the set with dummy items to exactly ``k``, samples one item and
reports it with the full eps; the estimate is scaled by ``k``. Its variance
at ``f = 0``, ``k^2 / (n sinh^2(eps/2))``, is never larger than this
module's OUE ``1 / (n sinh^2(eps/(2k)))`` (``sinh`` is superadditive), and
much smaller at large eps; it adds sampling noise for frequent items and
needs a wider output (``d + k`` bits). The bit-vector form here is simpler
and exactly what RAPPOR-style collectors expect.

Error metric: Hamming distance between the released and the true bit
vectors. ``E[rho] = |S| (1 - p) + (d - |S|) q``, linear in ``|S|``; the worst
case is ``|S| = min(k, d)`` when ``1 - p >= q`` (always for OUE; equality for
symmetric, whose error ``d q`` does not depend on the set).

Lower bound. The value space is the ``m + 1 = sum_{i <= min(k,d)} C(d, i)``
admissible sets under the Hamming metric, with diameter ``min(2k, d)`` and
minimum distance ``kappa = 1``. The outputs live in the larger space
``{0,1}^d`` with the same metric; both theorems' proofs (disjoint balls and
Markov's inequality) hold unchanged there. We report the larger of

* Theorem 5.3: ``(1 - delta) min(2k, d) / (2 (1 + e^eps))``, about
  ``min(2k, d)/4`` at small eps, so it wins there when ``min(2k, d) > 4``, and
* Theorem 5.5 with ``kappa = 1``: ``(1 - delta) m / (m + e^eps)``, below 1,
  which wins at larger eps (``m`` is combinatorially large, so it decays
  only once ``e^eps`` is comparable to the number of admissible sets).

Both are valid, so their maximum is. Neither knows about the ``d`` bits
being flipped independently, so the ratio of ``expected_error`` to this
bound is large (about ``d q``): bit-flip mechanisms are built for frequency
estimation, not for Hamming accuracy of one record.

References
----------
* T. Wang, J. Blocki, N. Li, S. Jha, *Locally differentially private
  protocols for frequency estimation*, USENIX Security 2017, Sec. 4 (OUE).
* U. Erlingsson, V. Pihur, A. Korolova, *RAPPOR: randomized aggregatable
  privacy-preserving ordinal response*, CCS 2014 (basic one-time RR).
* Z. Qin et al., *Heavy hitter estimation over set-valued data with local
  differential privacy*, CCS 2016; T. Wang, N. Li, S. Jha, *Locally
  differentially private frequent itemset mining*, IEEE S&P 2018
  (padding and sampling).
* M. Jazbec, *Splošna definicija diferencirane zasebnosti*, 2018, Thms. 5.3, 5.5.
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

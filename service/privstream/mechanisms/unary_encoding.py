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

Derivation of epsilon. Neighbouring records are two arbitrary sets
``A, B`` with ``|A|, |B| <= k``. For an output ``y`` the likelihood ratio
factorises over the bits; bits outside ``A xor B`` cancel. Each bit of
``A \ B`` contributes ``p/q`` (if ``y_j = 1``) or ``(1-p)/(1-q)`` (if
``y_j = 0``), at most ``e^alpha`` with ``alpha = ln(p/q)``; each bit of
``B \ A`` at most ``e^beta`` with ``beta = ln((1-q)/(1-p))`` (both > 0 for
``p > q``). So, attained by the output ``y = 1`` on ``A \ B`` and ``0`` on
``B \ A``::

    max_y P(y | A) / P(y | B) = exp(|A \ B| alpha + |B \ A| beta)

The sizes satisfy ``|A \ B|, |B \ A| <= min(k, d)`` and their sum is at most
``d``. With ``alpha >= beta`` the worst pair is disjoint with
``|A \ B| = a = min(k, d)`` and ``|B \ A| = b = min(k, d - a)``; for
``d >= 2k``, ``a = b = k``. Smaller sets differ in fewer bits, so they
satisfy the same bound: the calibration ``a alpha + b beta = eps`` covers
every pair of admissible sets, and it is tight. Pure eps-DP for singletons
of outputs gives it for every output set by summation.

* OUE: ``alpha = ln((e^e1 + 1)/2)``, ``beta = ln(2 e^e1 / (e^e1 + 1))``, so
  ``alpha + beta = e1`` and ``alpha >= beta`` (AM-GM). For ``d >= 2k`` the
  set costs ``k e1``: ``e1 = eps / k`` (changing one item into another costs
  ``e1``, Wang et al.'s per-item epsilon). For ``k < d < 2k`` (or
  ``d <= k``, then ``b = 0``), ``a alpha(e1) + b beta(e1)`` is increasing in
  ``e1`` and lies between ``(a + b) e1 / 2`` and ``a e1``; we solve it by
  bisection, keeping the end whose cost is ``<= eps``. ``p = 1/2`` is the
  variance-optimal choice only for ``d >= 2k``; we keep it throughout.
* symmetric: ``alpha = beta = c``, so the set costs ``(a + b) c`` with
  ``a + b = min(2k, d)`` differing bits: ``c = eps / min(2k, d)``. In RAPPOR's
  notation ``p = e^(e'/2)/(e^(e'/2) + 1)`` with ``e' = 2c = 2 eps / min(2k, d)``
  per item changed (``e' = eps / k`` when ``d >= 2k``).

Sampling: one 64-bit word per bit; the output bit is ``w < T`` with
``T1 = floor(p 2**64)`` for a true bit and ``T0 = ceil(q 2**64)`` for a false
one (``T0 >= 1``), so the realised pair is exactly ``(T1, T0) / 2**64``. Its
whole-set epsilon (``realized_epsilon``) is the formula above with
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

Analyst side (``estimate_item_frequencies``). With ``f_j`` the share of
records whose set holds item ``j`` and ``mean_j`` the share of released
vectors with bit ``j`` set, ``E[mean_j] = f_j p + (1 - f_j) q`` and
``f_hat_j = (mean_j - q)/(p - q)`` is unbiased; given the data the bits are
independent, so::

    Var[f_hat_j] = (f_j p (1 - p) + (1 - f_j) q (1 - q)) / (n (p - q)^2)

(for OUE at ``f_j = 0`` this is Wang et al.'s ``4 e^e1 / (n (e^e1 - 1)^2)``).
``estimator_variance`` gives the worse of ``f_j = 0`` and ``f_j = 1``; the
standard errors ``estimate_item_frequencies`` returns are this formula at
``f_hat_j`` clipped to [0, 1] (the binomial plug-in
``sqrt(mean_j (1 - mean_j) / n) / (p - q)`` would be conservative, by
concavity, but wider than needed when items have mixed frequencies).

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
from decimal import ROUND_CEILING, Context, Decimal
from fractions import Fraction
from typing import ClassVar, Literal

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.base import Mechanism, compact_gamma, exp_neg, log_upper_bound
from privstream.mechanisms.rng import NoiseSource
from privstream.mechanisms.validation import check_domain, check_epsilon

Variant = Literal["optimized", "symmetric"]
VARIANTS: tuple[Variant, ...] = ("optimized", "symmetric")
#: the keyed noise source serves at most 2**17 words per record and field
MAX_UNIVERSE = 2**17

_TWO_64 = 2**64
_BISECTION_STEPS = 200


def worst_case_differences(universe_size: int, max_items: int) -> tuple[int, int]:
    """``(a, b)``: the largest ``|A \\ B|`` and then ``|B \\ A|`` of admissible sets."""
    a = min(max_items, universe_size)
    return a, min(max_items, universe_size - a)


def _oue_alpha(e1: float) -> float:
    """``ln((e^e1 + 1) / 2)``, the cost of a bit that is 1 under A and 0 under B."""
    return float(np.logaddexp(e1, 0.0)) - math.log(2.0)


def _oue_set_cost(e1: float, a: int, b: int) -> float:
    alpha = _oue_alpha(e1)
    return a * alpha + b * (e1 - alpha)


def _oue_bit_epsilon(epsilon: float, a: int, b: int) -> float:
    """Solve ``a alpha(e1) + b beta(e1) = eps`` for ``e1`` (never overshooting)."""
    if a == b:
        return epsilon / a
    lo, hi = epsilon / a, 2.0 * epsilon / (a + b)  # cost(lo) <= eps <= cost(hi)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if _oue_set_cost(mid, a, b) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo


def unary_calibration(
    universe_size: int, max_items: int, epsilon: float, variant: Variant
) -> tuple[float, float, float]:
    """``(p, q, item_epsilon)`` making sets of ``<= max_items`` items eps-DP.

    ``p = P(1 -> 1)``, ``q = P(0 -> 1)``; ``item_epsilon = alpha + beta`` is
    the cost of swapping one item for another (``e1`` for OUE, ``2c`` for
    symmetric).
    """
    eps = check_epsilon(epsilon)
    a, b = worst_case_differences(universe_size, max_items)
    if variant == "optimized":
        e1 = _oue_bit_epsilon(eps, a, b)
        e = exp_neg(e1)
        return 0.5, e / (1.0 + e), e1
    if variant == "symmetric":
        c = eps / (a + b)
        e = exp_neg(c)
        return 1.0 / (1.0 + e), e / (1.0 + e), 2.0 * c
    raise MechanismError(f"variant {variant!r} is not one of {', '.join(VARIANTS)}")


def unary_probabilities(
    universe_size: int, max_items: int, epsilon: float, variant: Variant
) -> tuple[float, float]:
    """``(p, q)`` = P(1 -> 1), P(0 -> 1) making sets of ``<= max_items`` items eps-DP."""
    p, q, _ = unary_calibration(universe_size, max_items, epsilon, variant)
    return p, q


def set_epsilon(p: float, q: float, universe_size: int, max_items: int) -> float:
    """The eps a bit-flip pair ``(p, q)`` gives sets of ``<= max_items`` items (exact max ratio)."""
    alpha = math.log(p) - math.log(q)
    beta = math.log1p(-q) - math.log1p(-p)
    return _set_cost(alpha, beta, universe_size, max_items)


def _set_cost(alpha: float, beta: float, universe_size: int, max_items: int) -> float:
    a, b = worst_case_differences(universe_size, max_items)
    return a * max(alpha, beta) + b * min(alpha, beta)


def _floor_to_words(probability: float) -> int:
    num, den = probability.as_integer_ratio()
    return min((num * _TWO_64) // den, _TWO_64 - 1)


def _ceil_to_words(probability: float) -> int:
    num, den = probability.as_integer_ratio()
    return min(max(-((-num * _TWO_64) // den), 1), _TWO_64 - 1)


def _symmetric_false_threshold(c: float) -> int:
    """``T0 = ceil(2^64 / (1 + e^c))`` from 60-digit ``decimal``, never below the exact value."""
    context = Context(prec=60)
    q = context.divide(Decimal(1), Decimal(1) + context.exp(Decimal(min(c, 300.0))))
    scaled = context.multiply(q, Decimal(_TWO_64) * (1 + Decimal(10) ** -50))
    return max(1, int(scaled.to_integral_value(ROUND_CEILING)))


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
                t0 = _symmetric_false_threshold(item / 2.0)
                t1 = _TWO_64 - t0
            else:
                t1, t0 = _floor_to_words(p), _ceil_to_words(q)
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
        cost = _set_cost(alpha, beta, self.universe_size, self.max_items)
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


def estimate_item_frequencies(
    bits: NDArray[np.bool_],
    epsilon: float,
    *,
    max_items: int,
    variant: Variant = "optimized",
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Debiased share of records holding each item, and its standard error.

    ``bits`` is an ``(n, |U|)`` array of releases made with the same
    ``epsilon``, ``max_items`` and ``variant``. ``f_hat_j = (mean_j - q)/(p - q)``,
    not clipped to [0, 1] (clipping would bias it); the standard error is the
    exact variance given the data at ``f_hat_j`` clipped to [0, 1].
    """
    arr = np.asarray(bits, dtype=np.bool_)
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise MechanismError(f"expected a non-empty (n, |U|) array of reports, got {arr.shape}")
    n, d = arr.shape
    p, q = unary_probabilities(d, max_items, epsilon, variant)
    estimates = (arr.mean(axis=0) - q) / (p - q)
    f = np.clip(estimates, 0.0, 1.0)
    spread = f * p * (1.0 - p) + (1.0 - f) * q * (1.0 - q)
    stderr = np.sqrt(spread / n) / (p - q)
    return estimates, stderr


def estimate_item_frequencies_from_counts(
    counts: Sequence[int] | NDArray[np.int64],
    n: int,
    epsilon: float,
    *,
    max_items: int,
    variant: Variant = "optimized",
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``estimate_item_frequencies`` from per-item counts, for streams too long to hold.

    ``counts[j]`` is how many of ``n`` released vectors have bit ``j`` set
    (one count per universe item, in the universe's order: ``p`` and ``q``
    depend on the universe size). Same estimator and standard error:
    ``f_hat_j = (counts_j / n - q) / (p - q)``.
    """
    arr = np.asarray(counts, dtype=np.float64)
    if arr.ndim != 1 or len(arr) == 0:
        raise MechanismError(f"expected one count per universe item, got shape {arr.shape}")
    if n < 1:
        raise MechanismError(f"the estimator needs at least one record, got n = {n}")
    if np.any(arr < 0) or np.any(arr > n):
        raise MechanismError(f"counts must lie in [0, n = {n}]")
    p, q = unary_probabilities(len(arr), max_items, epsilon, variant)
    estimates: NDArray[np.float64] = (arr / n - q) / (p - q)
    f = np.clip(estimates, 0.0, 1.0)
    spread = f * p * (1.0 - p) + (1.0 - f) * q * (1.0 - q)
    stderr: NDArray[np.float64] = np.sqrt(spread / n) / (p - q)
    return estimates, stderr

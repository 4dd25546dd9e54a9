"""Discrete Laplace (two-sided geometric) noise on the integers, sampled exactly.

``P(Z = z) = (1 - a)/(1 + a) * a^|z|`` with ``a = e^(-1/t)``, ``t > 0``;
``E|Z| = 2a/(1 - a^2)``, ``Var Z = 2a/(1 - a)^2``, ``P(Z = 0) = (1-a)/(1+a)``.

Claim: the sampled law is within ``(1 +- xi)^2`` (``xi <= XI_BOUND = 2^-40``)
of the discrete Laplace of a parameter ``t_ref >= t``, and ``certified_delta``
bounds the hockey-stick divergence of that realised law at integer shift
``Delta`` (exact profile ``delta(eps) = F(z*) - e^eps F(z* - Delta)``).

Calibration: ``calibrate`` solves the ideal profile at
``eps_c = eps (1 - 2^-40) - 4.0001 XI_BOUND`` and
``delta_c = delta (1 - 10^-9) / (1 + XI_BOUND)^2 - 10^-15`` (pure when
``delta_c <= 0``); a declared delta of 0 is a realised delta of 0.

Sampler contract (``GeometricSampler``): ``Z = G1 - G2``, each geometric a
mixed-radix sum of independent components, each read from one 64-bit word
against exact integer thresholds (no floating-point ``log`` decides an
outcome); one ``words`` call per column, ``more_words`` only for rows whose
head extends, so what a row reads depends on its own words only. The support
is all of ``N`` for every input; a row extending 4096 rounds fails the
release (probability ``e^-16384``, independent of the data).

Proof, step by step, with the function each step proves:
docs/proofs/discrete-laplace.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Context, Decimal

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.rng import NoiseSource, Words
from privstream.mechanisms.thresholds import Level

_BISECTION_STEPS = 200
#: largest noise parameter served (noise sums stay far inside int64)
MAX_SCALE = 2.0**40
#: a-priori bound on the sampler's pointwise relative error, checked at construction
XI_BOUND = 2.0**-40
#: calibration margins (proof page): privacy slack of XI_BOUND, float rounding
EPSILON_SLACK = 4.0001 * XI_BOUND
_EPSILON_MARGIN = 2.0**-40
_DELTA_RELATIVE, _DELTA_ABSOLUTE = 1e-9, 1e-15

PEEL_BITS = 12
MAX_HEAD_SCALE = 2.0**12
HEAD_SPAN = 4.0
_TWO_64 = 1 << 64
#: rounds of a head before the source is declared broken (each extends w.p. <= e^-4)
_MAX_ROUNDS = 4096
_CTX = Context(prec=60)


def _level(log_a: Decimal, exponent: int, cells: int, extension: int | None) -> Level:
    """Thresholds of a component with base ``b = a_ref^exponent`` and ``cells`` cells.

    ``extension`` is ``T`` for the head (top ``T`` words extend), None for a digit.
    """
    one = Decimal(1)
    multiply, divide, subtract = _CTX.multiply, _CTX.divide, _CTX.subtract
    b = _CTX.exp(multiply(log_a, Decimal(exponent)))
    top = subtract(one, _CTX.power(b, cells)) if extension is None else one
    scale = Decimal(_TWO_64)
    # every operation in ``_CTX``, never the caller's context: a ``decimal`` precision
    # an embedding program lowered would otherwise move the thresholds, unseen by ``xi``.
    # The head divides by exactly 1 (a 60-digit quotient is the dividend): skipped
    bounds, power = [], one
    for _ in range(1, cells):
        power = multiply(power, b)
        cumulative = subtract(one, power)
        if extension is None:
            cumulative = divide(cumulative, top)
        bounds.append(round(multiply(cumulative, scale)))  # ROUND_HALF_EVEN, to an int
    if extension is not None:
        bounds.append(_TWO_64 - extension)
    smallest = divide(multiply(_CTX.power(b, cells - 1), subtract(one, b)), top)
    xi = float(divide(Decimal("1.000001"), multiply(smallest, scale)))
    return Level(shift=exponent.bit_length() - 1, bounds=bounds, xi=xi)


class GeometricSampler:
    """Exact-threshold sampler of ``P(G = k) ~ a_ref^k`` (proof page)."""

    def __init__(self, t: float) -> None:
        self.t = t
        peel = 0
        while t / 2.0**peel > MAX_HEAD_SCALE:
            peel += PEEL_BITS
        cells = max(1, math.ceil(HEAD_SPAN * t / 2.0**peel))
        n = cells << peel
        tail = _CTX.exp(_CTX.divide(Decimal(-n), Decimal(t)))  # a^N, 60 digits
        raised = _CTX.multiply(
            _CTX.multiply(tail, Decimal(_TWO_64)), Decimal("1." + "0" * 44 + "1")
        )
        self.extension = max(1, int(raised.to_integral_value(ROUND_CEILING)))
        # in ``_CTX`` (not the caller's context): a_ref^N is T / 2^64 to 60 digits
        ratio = _CTX.divide(Decimal(self.extension), Decimal(_TWO_64))
        self.log_a_ref = _CTX.divide(_CTX.ln(ratio), Decimal(n))
        digits = [
            _level(self.log_a_ref, 1 << (PEEL_BITS * j), 1 << PEEL_BITS, None)
            for j in range(peel // PEEL_BITS)
        ]
        self.levels = (*digits, _level(self.log_a_ref, 1 << peel, cells, self.extension))
        self.head_jump = n
        self.xi = math.prod(1.0 + level.xi for level in self.levels) * (1.0 + 1e-15) - 1.0
        if self.xi > XI_BOUND:
            raise MechanismError(
                f"discrete Laplace scale {t:.6g}: the sampler's relative error {self.xi:.3g} "
                f"exceeds {XI_BOUND:.3g}; narrow the bounds or raise epsilon"
            )

    @property
    def t_ref(self) -> float:
        """The parameter of the reference geometric, ``-1/ln a_ref >= t``."""
        return float(_CTX.divide(Decimal(-1), self.log_a_ref))

    @property
    def words_per_geometric(self) -> int:
        return len(self.levels)

    def geometric(self, words: Words) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
        """First-round values of geometrics, one per row of ``words[..., :width]``.

        Also returns whether each head extends (needs another round).
        """
        total, extends = self.head_round(words[..., -1])
        for column, level in enumerate(self.levels[:-1]):
            total += level.values(words[..., column]) << level.shift
        return total, extends

    def head_round(self, words: Words) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
        """One round of the head from one word per row: its value, and whether it extends."""
        head = self.levels[-1]
        index = head.values(words)
        extends = index == len(head.bounds)
        if head.shift:
            index <<= head.shift
        index[extends] = self.head_jump
        return index, extends

    def difference(self, source: NoiseSource, n: int) -> NDArray[np.int64]:
        """``G1 - G2`` for ``n`` rows: one ``words`` call, ``more_words`` for extending heads.

        Row ``i`` reads words ``0 .. 2w - 1`` (``w`` per geometric), then words
        ``2w + 2r`` and ``2w + 2r + 1`` in round ``r`` while either head extends:
        what a row reads depends on its own words only.
        """
        width = self.words_per_geometric
        words = source.words(n, 2 * width).reshape(n, 2, width)
        values, extends = self.geometric(words)
        z = values[:, 0] - values[:, 1]
        active = np.flatnonzero(extends[:, 0] | extends[:, 1])
        pending = extends[active]
        start = 2 * width
        while len(active):
            if start >= 2 * (width + _MAX_ROUNDS):  # probability e^-16384 per row: a broken source
                raise MechanismError(
                    f"the noise source extended a geometric {_MAX_ROUNDS} times in a row; "
                    "its words are not uniform"
                )
            extra = source.more_words(active, start, 2)
            value, again = self.head_round(extra)
            value[~pending] = 0  # a head that has stopped reads nothing more
            z[active] += value[:, 0] - value[:, 1]
            pending &= again
            keep = pending[:, 0] | pending[:, 1]
            active, pending = active[keep], pending[keep]
            start += 2
        return z


def _cdf(t: float, z: int) -> float:
    a = math.exp(-1.0 / t)
    if z <= 0:
        return math.exp(z / t) / (1.0 + a)  # a^-z with z <= 0
    return 1.0 - math.exp(-(z + 1) / t) / (1.0 + a)


def ideal_delta(t: float, epsilon: float, sensitivity: int) -> float:
    """Exact hockey-stick divergence of the ideal discrete Laplace ``t`` (proof page)."""
    if epsilon >= sensitivity / t:
        return 0.0
    z_star = math.ceil((sensitivity - epsilon * t) / 2.0) - 1
    # z* - Delta < 0, so e^eps F(z* - Delta) = exp(eps + (z* - Delta)/t) / (1 + a),
    # an exponent near (eps - eps0)/2 < 0: no overflow even for eps in the hundreds
    scaled_tail = math.exp(epsilon + (z_star - sensitivity) / t) / (1.0 + math.exp(-1.0 / t))
    return max(_cdf(t, z_star) - scaled_tail, 0.0)


@dataclass(frozen=True)
class DiscreteLaplace:
    """Discrete Laplace noise with parameter ``t`` (so ``a = e^(-1/t)``)."""

    t: float
    #: the exact-threshold sampler, built (and its ``xi`` checked) with the object
    sampler: GeometricSampler = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.t <= MAX_SCALE:
            raise MechanismError(
                f"discrete Laplace scale {self.t:.3g} is outside (0, 2**40]; "
                "narrow the bounds or raise epsilon"
            )
        object.__setattr__(self, "sampler", GeometricSampler(self.t))

    @property
    def a(self) -> float:
        return math.exp(-1.0 / self.t)

    @property
    def one_minus_a(self) -> float:
        """``1 - a`` without cancellation for large ``t``."""
        return -math.expm1(-1.0 / self.t)

    def cdf(self, z: int) -> float:
        return _cdf(self.t, z)

    def delta(self, epsilon: float, sensitivity: int) -> float:
        """Exact hockey-stick divergence of the *ideal* noise at ``epsilon``, integer shift."""
        return ideal_delta(self.t, epsilon, sensitivity)

    def certified_delta(self, epsilon: float, sensitivity: int) -> float:
        """Upper bound on the delta the *sampler* realises at ``epsilon`` (proof page)."""
        xi = self.sampler.xi
        slacked = epsilon * (1.0 - _EPSILON_MARGIN) - 4.0001 * xi
        ideal = self.delta(slacked, sensitivity)
        if ideal == 0.0:
            return 0.0
        return (1.0 + xi) ** 2 * (ideal * (1.0 + _DELTA_RELATIVE) + _DELTA_ABSOLUTE)

    @property
    def mean_abs(self) -> float:
        a = self.a
        return 2.0 * a / (self.one_minus_a * (1.0 + a))

    @property
    def variance(self) -> float:
        return 2.0 * self.a / self.one_minus_a**2

    @property
    def p_zero(self) -> float:
        return self.one_minus_a / (1.0 + self.a)

    def sample(self, source: NoiseSource, n: int) -> NDArray[np.int64]:
        """``n`` integers, row ``i`` from row ``i``'s word stream (one ``words`` call)."""
        return self.sampler.difference(source, n)


def discrete_laplace_cdf(t: float) -> Callable[[NDArray[np.int64]], NDArray[np.float64]]:
    """Vectorised CDF of discrete Laplace noise with parameter ``t`` (``a = e^(-1/t)``)."""
    a = math.exp(-1.0 / t)

    def cdf(k: NDArray[np.int64]) -> NDArray[np.float64]:
        z = np.asarray(k, dtype=np.float64)
        low = np.exp(np.minimum(z, 0.0) / t) / (1.0 + a)
        high = 1.0 - np.exp(-(np.maximum(z, 0.0) + 1.0) / t) / (1.0 + a)
        out: NDArray[np.float64] = np.where(z <= 0, low, high)
        return out

    return cdf


def smallest_epsilon(sensitivity: int) -> float:
    """The least epsilon served: ``t = Delta / eps_c <= 2**40``, slack below eps / 1000."""
    return max(1000.0 * EPSILON_SLACK, sensitivity / MAX_SCALE * (1.0 + 2.0**-30) + EPSILON_SLACK)


def calibration_epsilon(epsilon: float, sensitivity: int) -> float:
    """``eps_c = eps (1 - 2^-40) - 4.0001 XI_BOUND`` (proof page), or MechanismError."""
    if epsilon < smallest_epsilon(sensitivity):
        raise MechanismError(
            f"epsilon {epsilon:.3g} is below the smallest the discrete Laplace sampler serves at "
            f"sensitivity {sensitivity}, {smallest_epsilon(sensitivity):.3g} (the noise parameter "
            f"Delta/epsilon must stay <= 2**40, and the sampler's slack of {EPSILON_SLACK:.2g} "
            "below a thousandth of epsilon); raise epsilon or narrow the bounds"
        )
    return epsilon * (1.0 - _EPSILON_MARGIN) - EPSILON_SLACK


def calibrate(epsilon: float, delta: float, sensitivity: int) -> DiscreteLaplace:
    """The least noise whose *realised* profile meets (epsilon, delta) at ``sensitivity``."""
    eps_c = calibration_epsilon(epsilon, sensitivity)
    pure_t = sensitivity / eps_c  # <= 2**40 (calibration_epsilon)
    delta_c = delta * (1.0 - _DELTA_RELATIVE) / (1.0 + XI_BOUND) ** 2 - _DELTA_ABSOLUTE
    if delta_c <= 0.0:
        return DiscreteLaplace(pure_t)
    lo, hi = 1e-9 * pure_t, pure_t  # hi always satisfies the bound (delta(eps) = 0)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        if ideal_delta(mid, eps_c, sensitivity) <= delta_c:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-12 * hi:
            break
    return DiscreteLaplace(hi)  # the side that satisfies the bound

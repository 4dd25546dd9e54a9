"""Calibration of unary encoding: the per-bit ``(p, q)`` making a whole set eps-DP.

Claim: flipping every bit of a set's indicator vector independently with
``P(1 -> 1) = p``, ``P(0 -> 1) = q`` makes sets of at most ``k`` items of a
universe of ``d`` pure eps-DP with ``eps = a alpha + b beta`` (tight), where
``alpha = ln(p/q) >= beta = ln((1-q)/(1-p))``, ``a = min(k, d)``,
``b = min(k, d - a)``: the worst pair is disjoint and of the largest sizes.

Calibration: OUE ``p = 1/2``, ``q = 1/(e^e1 + 1)``, ``e1 = eps / k`` for
``d >= 2k``, else bisection keeping the end whose cost is ``<= eps``; symmetric
``alpha = beta = c = eps / min(2k, d)``. Integer thresholds
``T1 = floor(p 2^64)``, ``T0 = ceil(q 2^64)`` (symmetric ``T0`` from 60-digit
``decimal``), certified by the mechanism (``unary_encoding``).

Proof, step by step, with the function each step proves:
docs/proofs/unary-calibration.md.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Context, Decimal
from typing import Literal

import numpy as np

from privstream.errors import MechanismError
from privstream.mechanisms.base import exp_neg
from privstream.mechanisms.validation import check_epsilon

Variant = Literal["optimized", "symmetric"]
VARIANTS: tuple[Variant, ...] = ("optimized", "symmetric")

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
    return set_cost(alpha, beta, universe_size, max_items)


def set_cost(alpha: float, beta: float, universe_size: int, max_items: int) -> float:
    a, b = worst_case_differences(universe_size, max_items)
    return a * max(alpha, beta) + b * min(alpha, beta)


def floor_to_words(probability: float) -> int:
    num, den = probability.as_integer_ratio()
    return min((num * _TWO_64) // den, _TWO_64 - 1)


def ceil_to_words(probability: float) -> int:
    num, den = probability.as_integer_ratio()
    return min(max(-((-num * _TWO_64) // den), 1), _TWO_64 - 1)


def symmetric_false_threshold(c: float) -> int:
    """``T0 = ceil(2^64 / (1 + e^c))`` from 60-digit ``decimal``, never below the exact value.

    Every operation runs in the 60-digit context, none in the caller's (whose
    28 default digits would round ``1 + 10^-50`` to 1 and drop the margin that
    keeps the rounded quotient above the exact one).
    """
    context = Context(prec=60)
    q = context.divide(Decimal(1), context.add(Decimal(1), context.exp(Decimal(min(c, 300.0)))))
    margin = context.add(Decimal(1), context.power(Decimal(10), -50))
    scaled = context.multiply(q, context.multiply(Decimal(_TWO_64), margin))
    return max(1, int(scaled.to_integral_value(ROUND_CEILING)))

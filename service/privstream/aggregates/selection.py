"""Partition selection: release a group only when its noisy count passes a threshold.

Claim: with ``select_groups``, an aggregate's rows (the groups seen in the
window whose noisy count is at least ``tau``, with their values) are
``(eps, delta)``-DP for adding or removing a unit that reaches at most ``G``
groups with at most ``c`` records each.

The groups both neighbours hold are released as before (eps, post-processing
of their noisy totals; the threshold is post-processing of the noisy count).
A group only the unit holds has a count of at most ``c``; it passes with
probability ``q = P(Z >= tau - c) = a^(tau - c) / (1 + a)``, so some new group
shows with probability at most ``G q``, and ``e^eps G q <= delta`` covers both
directions (``e^eps`` for the direction where the new groups' absence is
conditioned on). ``threshold`` returns the least such ``tau``, with the
sampler's realised tail (``(1 + xi)^2``) and a margin. Proof:
docs/proofs/aggregates.md.
"""

from __future__ import annotations

import math

from privstream.errors import MechanismError
from privstream.mechanisms.discrete_laplace import XI_BOUND, DiscreteLaplace

#: relative margin on the realised tail (float rounding of the formula)
_MARGIN = 1e-9


def tail_above(noise: DiscreteLaplace, m: int) -> float:
    """``P(Z >= m)`` of the ideal discrete Laplace, ``m >= 1``: ``a^m / (1 + a)``."""
    return math.exp(-m / noise.t) / (1.0 + noise.a)


def new_group_delta(noise: DiscreteLaplace, epsilon: float, groups: int, m: int) -> float:
    """``e^eps G P(Z >= m)`` for the realised sampler (``(1 + xi)^2``), with a margin."""
    realised = tail_above(noise, m) * (1.0 + XI_BOUND) ** 2 * (1.0 + _MARGIN)
    return math.exp(epsilon) * groups * realised


def threshold(
    noise: DiscreteLaplace, epsilon: float, delta: float, groups: int, per_group: int
) -> int:
    """The least ``tau > c`` with ``e^eps G P(Z >= tau - c) <= delta`` (module docstring)."""
    if not 0.0 < delta < 1.0:
        raise MechanismError(f"partition selection needs 0 < delta < 1, got {delta:g}")
    # a^m (1 + xi)^2 (1 + margin) e^eps G / (1 + a) <= delta  <=>  m >= t ln(...)
    bound = math.exp(epsilon) * groups * (1.0 + XI_BOUND) ** 2 * (1.0 + _MARGIN)
    m = max(1, math.ceil(noise.t * math.log(bound / (delta * (1.0 + noise.a)))))
    while m > 1 and new_group_delta(noise, epsilon, groups, m - 1) <= delta:
        m -= 1
    while new_group_delta(noise, epsilon, groups, m) > delta:
        m += 1
    return per_group + m

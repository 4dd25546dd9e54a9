"""Parameter checks shared by every mechanism, written once.

Each check returns the cleaned value (a plain ``float`` or tuple) so a
constructor reads ``self.epsilon = check_epsilon(epsilon)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

from service.errors import MechanismError

T = TypeVar("T")


def check_epsilon(epsilon: float) -> float:
    """Epsilon must be a finite number > 0 (epsilon = 0 would need infinite noise)."""
    eps = float(epsilon)
    if not math.isfinite(eps) or eps <= 0.0:
        raise MechanismError(f"epsilon {epsilon!r} must be a finite number > 0")
    return eps


def check_delta(delta: float) -> float:
    """Delta must lie in [0, 1): delta = 1 is no guarantee at all."""
    dlt = float(delta)
    if not math.isfinite(dlt) or not 0.0 <= dlt < 1.0:
        raise MechanismError(f"delta {delta!r} must lie in [0, 1)")
    return dlt


def check_bounds(bounds: Sequence[float]) -> tuple[float, float]:
    """Bounds are two finite numbers, lower first (equal bounds are allowed)."""
    if len(bounds) != 2:
        raise MechanismError(f"bounds must be [lower, upper], got {len(bounds)} numbers")
    lo, hi = float(bounds[0]), float(bounds[1])
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise MechanismError(f"bounds [{lo}, {hi}] must be finite numbers")
    if lo > hi:
        raise MechanismError(f"bounds [{lo}, {hi}] are reversed; write [{hi}, {lo}]")
    return lo, hi


def check_domain(domain: Sequence[T]) -> tuple[T, ...]:
    """A finite domain has at least 2 values and no duplicates."""
    values = tuple(domain)
    if len(values) < 2:
        raise MechanismError(f"domain has {len(values)} value(s); it needs at least 2")
    seen: set[tuple[type, T]] = set()
    for position, value in enumerate(values):
        key = (type(value), value)
        if key in seen:
            raise MechanismError(
                f"domain value {value!r} (position {position}) appears twice; list each value once"
            )
        seen.add(key)
    return values


#: integers beyond this lose exactness in doubles and in the noise arithmetic
MAX_SAFE_INTEGER = 2**53


def check_integer_bounds(bounds: Sequence[float]) -> tuple[int, int]:
    """Integer bounds: two whole numbers, lower first, magnitude below 2**53."""
    lo, hi = check_bounds(bounds)
    if not (lo.is_integer() and hi.is_integer()):
        raise MechanismError(f"bounds [{lo:g}, {hi:g}] must be whole numbers for an integer field")
    if max(abs(lo), abs(hi)) >= MAX_SAFE_INTEGER:
        raise MechanismError(f"bounds [{lo:g}, {hi:g}] must lie within +/- 2**53")
    return int(lo), int(hi)

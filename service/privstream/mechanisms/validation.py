r"""Parameter checks shared by every mechanism, written once.

Each check returns the cleaned value (a plain ``float`` or tuple) so a
constructor reads ``self.epsilon = check_epsilon(epsilon)``.

Where overflow starts (the numeric limits)
------------------------------------------
Every numeric mechanism releases ``g n``: ``g = 2^e`` is the grid step
(:mod:`privstream.mechanisms.grid`) and ``n`` the grid index of the clamped
value plus integer noise, held in int64, so ``|n| < 2^63`` whatever the
sampler draws. The largest quantities computed from ``g n`` are

* a real or vector coordinate ``g n``: at most ``2^63 g``;
* a functional value ``(L g n)_i``: row ``i`` of the Cholesky factor has norm
  ``sqrt(1 + lambda) <= sqrt 2`` and ``k <= 4096`` coordinates, so by
  Cauchy-Schwarz at most ``sqrt(2 k) 2^63 g <= 2^69.5 g``;
* a vector's noise norm ``||g n||_2`` over ``k <= 65536`` coordinates: at
  most ``2^8 2^63 g = 2^71 g``.

All stay at most ``2^1023``, half the largest double, iff ``g <= 2^952``:
:data:`MAX_GRID_EXPONENT`. The grid step is ``g = 2^max(floor(log2 s) - 10,
ceil(log2 M) - 50)`` for a noise scale ``s`` and a magnitude ``M`` (largest
``|bound|``, or the L2 radius), so ``g <= 2^952`` iff ``floor(log2 s) <= 962``
and ``M <= 2^1002``. ``log2`` of a double just below ``2^963`` rounds to
exactly 963, so the scale limit keeps a binade of margin: ``s < 2^962``
(:data:`MAX_NOISE_SCALE`, about 3.9e289; then ``log2 s <= 962``) and ``M <= 2^1002``
(:data:`MAX_MAGNITUDE`, about 4.3e301). ``M <= 2^1002`` also keeps the width
``hi - lo <= 2^1003`` finite and every ``|x / g| <= 2^50`` (the grid's
design), so clamping, rounding and the release never leave the double range.

At the other end, ``g`` must be a normal double, ``g >= 2^-1022``
(:data:`MIN_GRID_EXPONENT`): below it the grid step is subnormal, and from
``s < 2^-1064`` on ``s / 2^10`` underflows to 0 and the grid step is 0 (the
``log2`` of it fails). With ``M`` small this is ``s >= 2^-1012`` (about
2.3e-305): for a real field ``s ~ (hi - lo) / epsilon``, so subnormal or
tiny bounds, or a huge epsilon over narrow bounds, land here.

Epsilon itself enters the configuration's budget as a sum over fields
(``math.fsum``), which must stay finite; each mechanism refuses the epsilons
its sampler cannot honour exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final, TypeVar

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError

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


#: the grid step ``g = 2^e`` keeps ``e`` in this range (module docstring)
MAX_GRID_EXPONENT: Final = 952
MIN_GRID_EXPONENT: Final = -1022
#: largest ``|bound|`` or L2 radius: ``g >= M / 2^50`` must stay ``<= 2^952``
MAX_MAGNITUDE: Final = 2.0**1002
#: noise scales below this give a grid step of at most ``2^952`` (``log2`` rounding included)
MAX_NOISE_SCALE: Final = 2.0**962
#: with a small magnitude, noise scales below this give a subnormal grid step
MIN_NOISE_SCALE: Final = 2.0**-1012


def check_bounds(bounds: Sequence[float]) -> tuple[float, float]:
    """Bounds are two finite numbers within ``+/- 2^1002``, lower first (equal is allowed)."""
    if len(bounds) != 2:
        raise MechanismError(f"bounds must be [lower, upper], got {len(bounds)} numbers")
    lo, hi = float(bounds[0]), float(bounds[1])
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise MechanismError(f"bounds [{lo}, {hi}] must be finite numbers")
    if lo > hi:
        raise MechanismError(f"bounds [{lo}, {hi}] are reversed; write [{hi}, {lo}]")
    reach = max(abs(lo), abs(hi))
    if reach > MAX_MAGNITUDE:
        width = " (their width hi - lo is not even a finite double)" if hi - lo > 2**1023 else ""
        raise MechanismError(
            f"bounds [{lo:g}, {hi:g}] reach {reach:.3g}, beyond the limit +/- 2**1002 "
            f"({MAX_MAGNITUDE:.3g}) where the noise grid step times an integer overflows a "
            f"double{width}; express the field in a larger unit (divide the values by a power "
            "of ten) so that the bounds stay within it"
        )
    return lo, hi


def check_magnitude(value: float, name: str) -> float:
    """A finite number in ``(0, 2^1002]`` (an L2 radius), or MechanismError naming ``name``."""
    number = float(value)
    if not math.isfinite(number) or number <= 0.0:
        raise MechanismError(f"{name} {value!r} must be a finite number > 0")
    if number > MAX_MAGNITUDE:
        raise MechanismError(
            f"{name} {number:.3g} is beyond the limit 2**1002 ({MAX_MAGNITUDE:.3g}) where the "
            "noise grid step times an integer overflows a double; express the values in a "
            "larger unit so that the radius stays within it"
        )
    return number


def grid_exponent(scale: float, magnitude: float) -> int:
    """``log2`` of ``grid.granularity(scale, magnitude)``, in log space (no underflow).

    ``scale`` must be finite and > 0 (a subnormal is fine here).
    """
    exponent = math.floor(math.log2(scale)) - 10
    if magnitude > 0.0:
        exponent = max(exponent, math.ceil(math.log2(magnitude)) - 50)
    return exponent


def check_noise_scale(
    scale: float, magnitude: float, *, finest: float = 1.0, width: str = "the bounds' width"
) -> float:
    """The noise scale of a grid mechanism, or MechanismError if its grid step leaves the range.

    ``finest``: the grid may be up to this many times finer than ``granularity(scale)``
    (vectors). ``width`` names what the scale is proportional to (``scale ~ width /
    epsilon``), for the fix.
    """
    if not math.isfinite(scale) or scale >= MAX_NOISE_SCALE:
        raise MechanismError(
            f"noise scale {scale:.3g} is at or above 2**962 ({MAX_NOISE_SCALE:.3g}): the grid "
            f"step times an integer would overflow a double; raise epsilon or reduce {width}: "
            f"the noise scale grows like {width} over epsilon"
        )
    if scale <= 0.0 or grid_exponent(scale / finest, magnitude) < MIN_GRID_EXPONENT:
        raise MechanismError(
            f"noise scale {scale:.3g} is below 2**-1012 ({MIN_NOISE_SCALE:.3g}): the grid step "
            "would be subnormal or 0; express the values in a smaller unit (multiply them by "
            f"a power of ten), increase {width} or lower epsilon"
        )
    return scale


def check_finite(values: NDArray[Any], name: str) -> NDArray[np.float64]:
    """``values`` as a float array if every entry is finite, else MechanismError.

    The message counts the offending entries and never quotes a value.
    """
    array = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(array)
    if not finite.all():
        bad = int(array.size - np.count_nonzero(finite))
        raise MechanismError(
            f"{name}: {bad} input value(s) are not finite (NaN or infinite); the pipeline "
            "dead-letters such records (reason not_finite) before any release"
        )
    return array


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

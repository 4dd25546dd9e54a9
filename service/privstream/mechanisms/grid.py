r"""The power-of-two output grid that closes the floating-point side channel.

Mironov (2012): for a textbook ``d + Lap(b)`` in doubles, the *set* of
reachable outputs depends on ``d`` (the low bits of the sum betray it), so
one output can rule out neighbouring inputs entirely. privstream never adds
floating-point noise to a raw value. A real value is first rounded to the
grid ``g Z`` (``g`` a power of two), noise is drawn as an *integer* ``Z``, and
the output is ``g * (round(d/g) + Z)`` computed in int64 and converted
exactly (``|k| < 2**53`` and multiplying by a power of two are exact). Every
input can reach exactly the same outputs: the grid points.

Accounting for the rounding. ``round`` is monotone, so clamped inputs in
``[lo, hi]`` land on integers in ``[round(lo/g), round(hi/g)]``: the
integer sensitivity is ``round(hi/g) - round(lo/g)`` (at most
``diam/g + 1``), and the mechanisms calibrate their integer noise against
that, not against ``diam/g``. Rounding adds at most ``g/2`` to the error;
``g`` is chosen about 2**-10 of the noise scale, so that is negligible.

Tiny epsilon. The noise scale can exceed the domain by far (epsilon 1e-6 on
``[0, 100]``: ``b = 10^8``); ``g`` is then capped at the largest power of two
``<= diam/2``, so at least two grid points lie inside the bounds and the
integer sensitivity stays ``>= 1`` (the noise, ``t = Delta/eps`` grid steps,
is then as wide as the continuous calibration asks). Only bounds whose
magnitude forces a coarser grid (``|bound| / 2**50 > diam/2``) are left
without two grid points; the mechanisms refuse those.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError

#: the grid is about this many times finer than the noise scale
GRID_STEPS_PER_SCALE = 2**10
#: keep |value / g| below this, so integers stay exact in doubles with room for noise
MAX_GRID_INDEX = 2.0**50


def granularity(scale: float, magnitude: float, diameter: float = 0.0) -> float:
    """A power of two near ``scale / 2**10``, coarse enough for ``|value| <= magnitude``.

    With ``diameter > 0`` it is at most ``diameter / 2`` unless the magnitude forbids it.
    """
    if scale <= 0.0 or not math.isfinite(scale):
        raise MechanismError(f"noise scale {scale!r} must be a finite number > 0")
    exponent = math.floor(math.log2(scale / GRID_STEPS_PER_SCALE))
    if diameter > 0.0:  # half of a subnormal diameter may round to 0: the finest grid then
        half = diameter / 2.0
        exponent = min(exponent, math.floor(math.log2(half)) if half > 0.0 else -1074)
    if magnitude / MAX_GRID_INDEX > 0.0:  # a subnormal magnitude: any grid holds it
        exponent = max(exponent, math.ceil(math.log2(magnitude / MAX_GRID_INDEX)))
    return math.ldexp(1.0, exponent)


def to_grid(values: NDArray[np.float64], g: float) -> NDArray[np.int64]:
    """Round finite values to grid indices (ties to even; monotone)."""
    return np.rint(values / g).astype(np.int64)


def from_grid(indices: NDArray[np.int64], g: float) -> NDArray[np.float64]:
    """Grid indices back to reals: exact for ``|index| < 2**53``."""
    return indices.astype(np.float64) * g


def grid_sensitivity(lower: float, upper: float, g: float) -> int:
    """Largest index distance between two values of ``[lower, upper]`` after rounding."""
    return int(np.rint(upper / g) - np.rint(lower / g))


def narrow_bounds_message(name: str, lower: float, upper: float, g: float) -> str:
    """Why a field has no two grid points inside its bounds, and the fix."""
    return (
        f"{name}: bounds [{lower:g}, {upper:g}] are too narrow for their magnitude: the grid "
        f"step {g:g} (at least |bound| / 2**50) leaves fewer than two grid points inside, so "
        "every value would be released as the same point; shift the bounds towards 0 or widen them"
    )

r"""Discrete Laplace (two-sided geometric) noise on the integers.

``P(Z = z) = (1 - a)/(1 + a) * a^|z|`` with ``a = e^(-1/t)``, ``t > 0``.

Exact privacy profile for integer sensitivity ``Delta >= 1``. With
``q(z) = p(z - Delta)`` the privacy loss is ``ln p/q = (|z - Delta| - |z|)/t``:
``eps0 = Delta/t`` for ``z <= 0``, ``(Delta - 2z)/t`` in between, ``-eps0`` for
``z >= Delta``. It exceeds ``eps`` exactly for ``z <= z*``, the largest
integer below ``(Delta - eps t)/2``, so the hockey-stick divergence is::

    delta(eps) = F(z*) - e^eps F(z* - Delta)

with the CDF ``F(z) = a^-z/(1+a)`` for ``z <= 0`` and
``1 - a^(z+1)/(1+a)`` for ``z >= 0``. ``delta(eps) = 0`` iff ``eps >= eps0``,
so pure DP needs ``t = Delta/eps``; for ``delta > 0`` we bisect on ``t`` for
the least noise with ``delta(eps) <= delta`` (the divergence falls as ``t``
grows).

Moments: ``E|Z| = 2a/(1 - a^2)``, ``Var Z = 2a/(1 - a)^2``, ``P(Z = 0) = (1-a)/(1+a)``.

Sampling: ``Z = G1 - G2`` with independent geometrics ``P(G >= k) = a^k``,
each ``G = floor(t E)``, ``E = -ln U`` exponential (``P(floor(tE) >= k) =
P(E >= k/t) = e^(-k/t)``). Two words per value, integer output, so the
output support is the same for every input. ``U >= 2^-53`` truncates each
geometric at ``36.7 t``: the cut tail has mass ``2^-53`` per draw, and the
floating-point ``ln`` perturbs the geometric's probabilities by a few ulps;
both are far below any delta the config can state and are not added to it.

References
----------
* S. Inusah, T. Kozubowski, *A discrete analogue of the Laplace
  distribution*, J. Stat. Planning and Inference 136, 2006.
* A. Ghosh, T. Roughgarden, M. Sundararajan, *Universally utility-maximizing
  privacy mechanisms*, STOC 2009 (the geometric mechanism).
* C. Canonne, G. Kamath, T. Steinke, *The discrete Gaussian for differential
  privacy*, NeurIPS 2020 (why noise must live on a lattice).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from service.errors import MechanismError
from service.mechanisms.rng import Words, words_to_uniform

_BISECTION_STEPS = 200
#: above this scale the 52-bit uniforms would skip integers of floor(t E); refuse instead
MAX_SCALE = 2.0**40


@dataclass(frozen=True)
class DiscreteLaplace:
    """Discrete Laplace noise with parameter ``t`` (so ``a = e^(-1/t)``)."""

    t: float

    def __post_init__(self) -> None:
        if not 0.0 < self.t <= MAX_SCALE:
            raise MechanismError(
                f"discrete Laplace scale {self.t:.3g} is outside (0, 2**40]; "
                "narrow the bounds or raise epsilon"
            )

    @property
    def a(self) -> float:
        return math.exp(-1.0 / self.t)

    @property
    def one_minus_a(self) -> float:
        """``1 - a`` without cancellation for large ``t``."""
        return -math.expm1(-1.0 / self.t)

    def cdf(self, z: int) -> float:
        a = self.a
        if z <= 0:
            return math.exp(z / self.t) / (1.0 + a)  # a^-z with z <= 0
        return 1.0 - math.exp(-(z + 1) / self.t) / (1.0 + a)

    def delta(self, epsilon: float, sensitivity: int) -> float:
        """Exact hockey-stick divergence at ``epsilon`` for integer ``sensitivity``."""
        if epsilon >= sensitivity / self.t:
            return 0.0
        z_star = math.ceil((sensitivity - epsilon * self.t) / 2.0) - 1
        # z* - Delta < 0, so e^eps F(z* - Delta) = exp(eps + (z* - Delta)/t) / (1 + a),
        # an exponent near (eps - eps0)/2 < 0: no overflow even for eps in the hundreds
        scaled_tail = math.exp(epsilon + (z_star - sensitivity) / self.t) / (1.0 + self.a)
        return max(self.cdf(z_star) - scaled_tail, 0.0)

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

    def sample(self, words: Words) -> NDArray[np.int64]:
        """One integer per row from two words per row (``words`` has shape (n, 2))."""
        exponentials = -np.log(words_to_uniform(words))
        geometric = np.floor(self.t * exponentials).astype(np.int64)
        return geometric[:, 0] - geometric[:, 1]


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


def calibrate(epsilon: float, delta: float, sensitivity: int) -> DiscreteLaplace:
    """The least noise whose exact profile meets (epsilon, delta) at ``sensitivity``."""
    pure = DiscreteLaplace(sensitivity / epsilon)
    if delta == 0.0:
        return pure
    lo, hi = 1e-9 * pure.t, pure.t  # hi always satisfies the bound (delta(eps) = 0)
    if hi > MAX_SCALE:
        raise MechanismError(
            f"discrete Laplace scale {hi:.3g} exceeds 2**40; narrow the bounds or raise epsilon"
        )
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        if DiscreteLaplace(mid).delta(epsilon, sensitivity) <= delta:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-12 * hi:
            break
    return DiscreteLaplace(hi)  # the side that satisfies the bound

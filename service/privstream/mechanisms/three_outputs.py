"""Three-Outputs on a bounded real: a report in ``{-C, 0, +C}``.

Claim: pure local ``eps``-DP for any two values, for the law actually sampled
(``eps_real = ln max(Z0 / Z1, P1 / A) <= eps``); the report is unbiased up
to ``C_d 2^-50 + 2^-52``.

Release ``mid + half y`` as for PM (``privstream.mechanisms.piecewise``).
Zhao et al. (2020): ``P(0 | t) = p - p (1 - e^-eps) |t|``, ``P(+-C | t)``
linear in ``t`` on each side of 0, ``C = e^eps (e^eps + 1) / ((e^eps - 1)
(e^eps - p))``; ``p`` in ``[0, e^eps / (e^eps + 2)]`` minimises the worst
variance (``p = 0``, Duchi's report, below eps ~0.7).

Calibration (``calibrate``): integer counts out of ``2^64``: ``Z0`` (0 at
``t = 0``, even), ``Z1 = ceil(Z0 / E)`` (0 at ``|t| = 1``), ``A =
ceil((2^64 - Z1) / (1 + E))`` (the far output at ``|t| = 1``), ``E <=
e^eps`` rational; every count of every input lies between its values at
``t = 0`` and ``|t| = 1``, so both ratios are checked exactly.

Sampler contract: one 64-bit word per value, one ``words`` call: the far
output iff ``w0 < far(t)``, 0 iff ``far(t) <= w0 < far(t) + zero(t)``.

Variance ``Var[y | t] = -t^2 + u |t| + c``: it depends on ``|t|``, not on
``t^2`` alone (``privstream.mechanisms.variance_law``).

Proof, step by step, with the function each step proves: docs/proofs/three-outputs.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.base import TWO_64, exp_lower_bound, log_upper_bound
from privstream.mechanisms.piecewise import SMALLEST_EPSILON, round_up
from privstream.mechanisms.rng import Words
from privstream.mechanisms.unit_interval import UnitIntervalMechanism
from privstream.mechanisms.variance_law import VarianceLaw

#: candidate shares ``p`` scanned between 0 and the cap ``e^eps / (e^eps + 2)``
P_STEPS = 4096
#: ``Z0`` is a multiple of this (``p`` on a fixed binary grid, and ``2^64 - Z0`` even)
Z0_UNIT = 2**32
#: the largest count error one float product and floor adds (``|t| K``, ``K < 2^64``)
COUNT_SLACK = 2**12 + 1


def ideal_worst_variance(epsilon: float, p: NDArray[np.float64]) -> NDArray[np.float64]:
    """``max_t Var[y | t]`` of the paper's law at each share ``p`` (for choosing ``p``)."""
    e = math.exp(min(epsilon, 40.0))
    c = e * (e + 1.0) / ((e - 1.0) * (e - p))
    constant, absolute = c * c * (1.0 - p), c * c * p * (1.0 - 1.0 / e)
    vertex = np.minimum(absolute / 2.0, 1.0)
    out: NDArray[np.float64] = constant + absolute * vertex - vertex * vertex
    return out


def zero_share(epsilon: float) -> float:
    """The ``p = P(0 | 0)`` of least worst-case variance, on a grid of ``P_STEPS`` shares."""
    e = math.exp(min(epsilon, 40.0))
    cap = e / (e + 2.0)
    shares = np.linspace(0.0, cap, P_STEPS + 1)[:-1]  # the cap itself leaves no room
    return float(shares[int(np.argmin(ideal_worst_variance(epsilon, shares)))])


@dataclass(frozen=True)
class ThreeOutputsLaw:
    """The integer counts out of ``2^64`` at ``t = 0`` and ``|t| = 1`` (proof page)."""

    zero_centre: int  # Z0
    zero_edge: int  # Z1
    far_edge: int  # A

    @property
    def far_centre(self) -> int:
        """``h = (2^64 - Z0) / 2``: each of ``+-C`` at ``t = 0``."""
        return (TWO_64 - self.zero_centre) // 2

    @property
    def near_edge(self) -> int:
        """``P1 = 2^64 - Z1 - A``: the output on ``t``'s side at ``|t| = 1``."""
        return TWO_64 - self.zero_edge - self.far_edge

    @property
    def width(self) -> int:
        """``D = P1 - A``: ``E[y | t] = C_d D |t| / 2^64``, so ``C_d = 2^64 / D``."""
        return self.near_edge - self.far_edge

    @property
    def magnitude(self) -> float:
        return TWO_64 / self.width

    def realised_ratio(self) -> Fraction:
        """The largest ratio of one output's probability over any two inputs (exact)."""
        ratio = Fraction(self.near_edge, self.far_edge)
        if self.zero_centre:
            ratio = max(ratio, Fraction(self.zero_centre, self.zero_edge))
        return ratio

    def bias(self) -> float:
        """``|E[y | t] - t|``: three count errors of ``COUNT_SLACK``, and ``C_d``'s rounding."""
        return self.magnitude * 3 * COUNT_SLACK / TWO_64 + 2.0**-52

    def counts(self, t: NDArray[np.float64]) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
        """``far(t)`` and ``zero(t)``: linear in ``|t|``, clipped to their ``t = 0`` and
        ``|t| = 1`` values whatever the float rounding."""
        a = np.abs(t)
        far_step = self.far_centre - self.far_edge
        zero_step = self.zero_centre - self.zero_edge
        far_drop = np.minimum((a * float(far_step)).astype(np.uint64), np.uint64(far_step))
        zero_drop = np.minimum((a * float(zero_step)).astype(np.uint64), np.uint64(zero_step))
        far = np.uint64(self.far_centre) - far_drop
        return far, np.uint64(self.zero_centre) - zero_drop

    def sample(self, t: NDArray[np.float64], word: NDArray[np.uint64]) -> NDArray[np.float64]:
        far, zero = self.counts(t)
        c = self.magnitude
        side = np.where(t < 0.0, -1.0, 1.0)
        far_or_zero = np.where(word < far + zero, 0.0, c)  # far + zero <= h + Z0 < 2^64
        out: NDArray[np.float64] = side * np.where(word < far, -c, far_or_zero)
        return out

    def variance_law(self) -> VarianceLaw:
        """``-t^2 + u |t| + c``: ``u = C_d^2 (Z0 - Z1) / 2^64``, ``c`` with the count slack
        and ``2 bias`` (``E[y]^2 >= t^2 - 2 bias``), both rounded up."""
        c2 = Fraction(self.magnitude) ** 2
        absolute = c2 * (self.zero_centre - self.zero_edge) / TWO_64
        slack = Fraction(TWO_64 - self.zero_centre + COUNT_SLACK, TWO_64)
        constant = c2 * slack + 2 * Fraction(self.bias())
        return VarianceLaw(-1.0, round_up(constant), round_up(absolute) if absolute else 0.0)


def calibrate(epsilon: float, share: float) -> ThreeOutputsLaw:
    """The counts for ``epsilon`` at the zero share ``p`` (module docstring); refuses
    epsilons the 64-bit thresholds cannot resolve."""
    e = exp_lower_bound(epsilon)
    zero_centre = math.floor(Fraction(share) * TWO_64 / Z0_UNIT) * Z0_UNIT
    zero_edge = math.ceil(zero_centre / e)
    far_edge = math.ceil((TWO_64 - zero_edge) / (1 + e))
    law = ThreeOutputsLaw(zero_centre, zero_edge, far_edge)
    if epsilon < SMALLEST_EPSILON or law.width < 2**16:
        raise MechanismError(
            f"epsilon {epsilon:.3g} is too small for the three_outputs mechanism's 64-bit "
            f"thresholds (use at least {SMALLEST_EPSILON:.3g}, or laplace)"
        )
    if not law.far_edge <= law.far_centre <= law.near_edge:  # pragma: no cover - p < cap
        raise MechanismError(f"three_outputs at epsilon {epsilon:g}: share {share:g} too large")
    if law.realised_ratio() > e:  # pragma: no cover - by construction
        raise MechanismError(f"three_outputs at epsilon {epsilon:g} exceeds its ratio")
    return law


class ThreeOutputsMechanism(UnitIntervalMechanism):
    """Zhao et al.'s Three-Outputs on exact integer counts (proof page)."""

    name: ClassVar[str] = "three_outputs"
    words_per_value: ClassVar[int] = 1

    def __init__(self, *, bounds: tuple[float, float], epsilon: float, delta: float = 0.0) -> None:
        super().__init__(bounds=bounds, epsilon=epsilon, delta=delta)
        self.law = calibrate(self.epsilon, zero_share(self.epsilon))
        self.check_reach()

    @property
    def realised_epsilon(self) -> float:
        # ratio <= E <= e^eps is checked exactly; the float log's upward margin is not a loss
        return min(self.epsilon, log_upper_bound(self.law.realised_ratio()))

    @property
    def unit_variance(self) -> float:
        return self.variance_law().worst()

    @property
    def reach(self) -> float:
        return self.law.magnitude

    def variance_law(self) -> VarianceLaw:
        return self.law.variance_law()

    def unit_bias(self) -> float:
        return self.law.bias()

    def unit_errors(self, t: NDArray[np.float64]) -> NDArray[np.float64]:
        """``E|y - t| = P(far) (C + |t|) + P(0) |t| + P(near) (C - |t|)``."""
        far, zero = (count.astype(np.float64) / TWO_64 for count in self.law.counts(t))
        a, c = np.abs(t), self.law.magnitude
        out: NDArray[np.float64] = far * (c + a) + zero * a + (1.0 - far - zero) * (c - a)
        return out

    def sample(self, t: NDArray[np.float64], words: Words) -> NDArray[np.float64]:
        return self.law.sample(t, words[:, 0])

    def params(self) -> dict[str, float | int | str]:
        return {
            "lower": self.lower,
            "upper": self.upper,
            "p_zero": self.law.zero_centre / TWO_64,
            "output_bound": self.law.magnitude * self.half,
            "realised_epsilon": self.realised_epsilon,
        }

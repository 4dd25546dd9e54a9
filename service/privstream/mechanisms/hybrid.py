"""Hybrid Mechanism (HM) on a bounded real: Duchi's binary report or PM, mixed.

Claim: pure local ``eps``-DP for any two values, for the law actually sampled
(``eps_real = max(eps_PM, eps_D) <= eps``: the component choice does not
depend on the input); the report is unbiased up to PM's and the coin's bias.

Release ``mid + half y`` as for PM (``privstream.mechanisms.piecewise``): ``y``
is PM's report with probability ``a = 1 - e^{-eps/2}`` for
``eps > EPS_STAR ~= 0.6094``, else Duchi et al.'s ``+-B`` (Wang et al. 2019,
Sec. III-C), both at the full ``eps``.

Calibration: the coin's ``L`` is the least integer with ``L (1 + E) >= 2^64``
(``E <= e^eps`` rational), so both outcome ratios are at most
``(2^64 - L) / L <= E``, checked exactly; ``B_d = 2^64 / D`` makes it unbiased.

Sampler contract: four 64-bit words per value, one ``words`` call: ``w0 < T_a``
selects PM (``w1..w3`` as ``PiecewiseGrid.sample``), else ``+B_d`` iff
``w1 < T(t)`` in ``[L, 2^64 - L]``.

Variance ``a c + (1 - a) B_d^2 + max(0, a s - (1 - a))``; lower bound Thm. 5.3.

Proof, step by step, with the function each step proves: docs/proofs/hybrid.md.
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
from privstream.mechanisms.piecewise import (
    PICK_SLACK,
    SMALLEST_EPSILON,
    PiecewiseGrid,
    calibrate,
    round_up,
)
from privstream.mechanisms.rng import Words
from privstream.mechanisms.unit_interval import UnitIntervalMechanism
from privstream.mechanisms.variance_law import VarianceLaw

#: below this HM is Duchi's mechanism alone (the worst-case variances cross here)
EPS_STAR = 0.6093524930273092
#: the largest double below 2^64: float offsets are clipped to it before the uint64 cast
_BELOW_TWO_64 = math.nextafter(2.0**64, 0.0)


@dataclass(frozen=True)
class DuchiCoin:
    """Duchi et al.'s binary report with integer thresholds ``[L, 2^64 - L]``."""

    low: int

    @property
    def width(self) -> int:
        """``D = 2^64 - 2L``: the threshold's range over ``t`` in ``[-1, 1]``."""
        return TWO_64 - 2 * self.low

    @property
    def magnitude(self) -> float:
        """``B_d = 2^64 / D``."""
        return TWO_64 / self.width

    def realised_ratio(self) -> Fraction:
        return Fraction(TWO_64 - self.low, self.low)

    def bias(self) -> float:
        """``|E[y | t] - t| <= 2^-49 + 2 / D`` (proof page)."""
        return 2.0**-49 + 2.0 / self.width

    def threshold(self, t: NDArray[np.float64]) -> NDArray[np.uint64]:
        """``T(t) = L + min(floor((t + 1)/2 D), D)``."""
        offset = np.clip((t + 1.0) * (self.width / 2.0), 0.0, _BELOW_TWO_64).astype(np.uint64)
        return np.uint64(self.low) + np.minimum(offset, np.uint64(self.width))

    def sample(self, t: NDArray[np.float64], word: NDArray[np.uint64]) -> NDArray[np.float64]:
        b = self.magnitude
        out: NDArray[np.float64] = np.where(word < self.threshold(t), b, -b)
        return out


def duchi_coin(epsilon: float, mechanism: str = "hybrid") -> DuchiCoin:
    """The least ``L`` with ``L (1 + E) >= 2^64``; refuses epsilons it cannot resolve."""
    low = math.ceil(Fraction(TWO_64) / (1 + exp_lower_bound(epsilon)))
    coin = DuchiCoin(max(low, 1))
    if epsilon < SMALLEST_EPSILON or coin.width < 2**16:
        raise MechanismError(
            f"epsilon {epsilon:.3g} is too small for the {mechanism} mechanism's 64-bit thresholds "
            f"(use at least {SMALLEST_EPSILON:.3g}, or laplace)"
        )
    return coin


def pm_share(epsilon: float) -> float:
    """Wang et al.'s ``a``: ``1 - e^{-eps/2}`` above ``EPS_STAR``, else 0."""
    return -math.expm1(-epsilon / 2.0) if epsilon > EPS_STAR else 0.0


class HybridMechanism(UnitIntervalMechanism):
    """PM with probability ``a``, Duchi's binary report otherwise (proof page)."""

    name: ClassVar[str] = "hybrid"
    words_per_value: ClassVar[int] = 4

    def __init__(self, *, bounds: tuple[float, float], epsilon: float, delta: float = 0.0) -> None:
        super().__init__(bounds=bounds, epsilon=epsilon, delta=delta)
        self.grid: PiecewiseGrid = calibrate(self.epsilon)
        self.coin = duchi_coin(self.epsilon)
        self.mix_threshold = min(math.floor(Fraction(pm_share(self.epsilon)) * TWO_64), TWO_64 - 1)
        self._outputs = self.grid.outputs()
        self.check_reach()

    @property
    def pm_probability(self) -> float:
        """The realised ``a = T_a / 2^64``."""
        return self.mix_threshold / TWO_64

    @property
    def realised_epsilon(self) -> float:
        ratio = self.coin.realised_ratio()
        if self.mix_threshold > 0:
            ratio = max(ratio, self.grid.realised_ratio())
        # ratio <= E <= e^eps is checked exactly; the float log's upward margin is not a loss
        return min(self.epsilon, log_upper_bound(ratio))

    def _law(self) -> tuple[Fraction, Fraction]:
        a = Fraction(self.mix_threshold, TWO_64)
        slope, constant = self.grid.variance_parts()
        b2 = Fraction(self.coin.magnitude) ** 2
        return a * slope * PICK_SLACK - (1 - a), a * constant * PICK_SLACK + (1 - a) * b2

    @property
    def unit_variance(self) -> float:
        slope, constant = self._law()
        return round_up(constant + max(Fraction(0), slope))

    @property
    def reach(self) -> float:
        return max(float(self.grid.cells * self.grid.step / 2), self.coin.magnitude)

    def variance_law(self) -> VarianceLaw:
        slope, constant = self._law()
        return VarianceLaw(float(slope), round_up(constant))

    def unit_bias(self) -> float:
        return max(self.grid.bias_bound(), self.coin.bias())

    def unit_errors(self, t: NDArray[np.float64]) -> NDArray[np.float64]:
        share = self.pm_probability
        b = self.coin.magnitude
        out: NDArray[np.float64] = share * self.grid.mean_abs_error(t) + (1.0 - share) * (
            b - t**2 / b
        )
        return out

    def sample(self, t: NDArray[np.float64], words: Words) -> NDArray[np.float64]:
        piecewise = words[:, 0] < np.uint64(self.mix_threshold)
        pm = self._outputs[self.grid.sample(t, words[:, 1:4])]
        duchi = self.coin.sample(t, words[:, 1])
        out: NDArray[np.float64] = np.where(piecewise, pm, duchi)
        return out

    def params(self) -> dict[str, float | int | str]:
        return {
            "lower": self.lower,
            "upper": self.upper,
            "pm_probability": self.pm_probability,
            "cells": self.grid.cells,
            "window": self.grid.window,
            "p_inside": float(self.grid.p_in),
            "duchi_bound": self.coin.magnitude * self.half,
            "realised_epsilon": self.realised_epsilon,
        }

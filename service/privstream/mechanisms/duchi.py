"""Duchi et al.'s mechanism on a bounded real, standalone: a binary report ``+-B``.

Claim: pure local ``eps``-DP for any two values, for the law actually sampled
(``eps_real = ln((2^64 - L) / L) <= eps``); the report is unbiased up to the
coin's bias (``DuchiCoin.bias``).

Release ``mid + half y`` as for PM (``privstream.mechanisms.piecewise``):
``y = +B`` with probability ``(1 + t / B) / 2``, else ``-B``,
``B = (e^eps + 1) / (e^eps - 1)`` (Duchi, Jordan and Wainwright 2018), at
every epsilon; hybrid uses the same coin below ``EPS_STAR`` only.

Calibration: the coin of ``privstream.mechanisms.hybrid`` (``duchi_coin``):
``L`` the least integer with ``L (1 + E) >= 2^64`` (``E <= e^eps`` rational),
both outcome ratios at most ``(2^64 - L) / L <= E``, checked exactly;
``B_d = 2^64 / D``, ``D = 2^64 - 2L``, makes it unbiased.

Sampler contract: one 64-bit word per value, one ``words`` call: ``+B_d`` iff
``w0 < T(t)``, ``T(t)`` in ``[L, 2^64 - L]``.

Variance ``Var[y | t] = B_d^2 - E[y | t]^2 <= B_d^2 - t^2 + 2 bias``: the
least of the menu for data at the bounds, the most at the centre.

Proof, step by step, with the function each step proves: docs/proofs/duchi.md.
"""

from __future__ import annotations

from fractions import Fraction
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from privstream.mechanisms.base import log_upper_bound
from privstream.mechanisms.hybrid import duchi_coin
from privstream.mechanisms.piecewise import round_up
from privstream.mechanisms.rng import Words
from privstream.mechanisms.unit_interval import UnitIntervalMechanism
from privstream.mechanisms.variance_law import VarianceLaw


class DuchiMechanism(UnitIntervalMechanism):
    """Duchi et al.'s binary report at the full epsilon (proof page)."""

    name: ClassVar[str] = "duchi"
    words_per_value: ClassVar[int] = 1

    def __init__(self, *, bounds: tuple[float, float], epsilon: float, delta: float = 0.0) -> None:
        super().__init__(bounds=bounds, epsilon=epsilon, delta=delta)
        self.coin = duchi_coin(self.epsilon, self.name)
        self.check_reach()

    @property
    def realised_epsilon(self) -> float:
        # ratio <= E <= e^eps is checked exactly; the float log's upward margin is not a loss
        return min(self.epsilon, log_upper_bound(self.coin.realised_ratio()))

    def _constant(self) -> Fraction:
        """``c = B_d^2 + 2 bias``: ``y^2 = B_d^2`` always, ``E[y]^2 >= t^2 - 2 |t| bias``."""
        return Fraction(self.coin.magnitude) ** 2 + 2 * Fraction(self.coin.bias())

    @property
    def unit_variance(self) -> float:
        return round_up(self._constant())

    @property
    def reach(self) -> float:
        return self.coin.magnitude

    def variance_law(self) -> VarianceLaw:
        return VarianceLaw(-1.0, round_up(self._constant()))

    def unit_bias(self) -> float:
        return self.coin.bias()

    def unit_errors(self, t: NDArray[np.float64]) -> NDArray[np.float64]:
        """``E|y - t| = B - t^2 / B`` (``P(+B) = (1 + t/B) / 2``)."""
        b = self.coin.magnitude
        out: NDArray[np.float64] = b - t**2 / b
        return out

    def sample(self, t: NDArray[np.float64], words: Words) -> NDArray[np.float64]:
        return self.coin.sample(t, words[:, 0])

    def params(self) -> dict[str, float | int | str]:
        return {
            "lower": self.lower,
            "upper": self.upper,
            "duchi_bound": self.coin.magnitude * self.half,
            "realised_epsilon": self.realised_epsilon,
        }

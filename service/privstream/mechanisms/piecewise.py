"""Piecewise Mechanism (PM) on a bounded real, sampled exactly on a fixed grid.

Claim: pure local ``eps``-DP for any two values, for the law actually sampled
(a declared delta is not used); the report is unbiased up to ``C_d 2^-48``.

Release ``mid + half y``: ``x`` clamped into ``[lo, hi]``, mapped to
``t = (x - mid) / half`` in ``[-1, 1]``, ``y`` Wang et al.'s PM report
(ICDE 2019, Alg. 2) on ``M = GRID_CELLS`` cells with a window of ``m`` cells:
the same ``M`` outputs for every input (Mironov 2012).

Calibration: ``T`` (inside iff ``w1 < T``) is the largest integer with
``P_in / (1 - P_in) <= E pi_min(M - m) / pi_max(m)``, ``E <= e^eps`` rational;
construction checks ``p_max / p_min <= E`` in exact arithmetic
(``realised_ratio``).

Sampler contract (``PiecewiseGrid``): three 64-bit words per value, one
``words`` call: randomised placement of the window, inside or outside, which
cell (a residue of ``w2``).

Worst variance ``t^2 (1/kappa - 1) + kappa h^2/4 + kappa v_m + (1 - P_in) S_2 / (M - m)``
at ``t^2 = 1``; error ``half max_t E|y - t|`` on 129 values of ``t``; lower bound
``(1 - delta) diam / (2 (1 + e^eps))`` (Thm. 5.3).

Proof, step by step, with the function each step proves: docs/proofs/piecewise.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.base import (
    TWO_64,
    exp_lower_bound,
    log_upper_bound,
)
from privstream.mechanisms.randomized_response import pick_probabilities
from privstream.mechanisms.rng import Words
from privstream.mechanisms.unit_interval import UnitIntervalMechanism
from privstream.mechanisms.variance_law import VarianceLaw

#: cells of the output grid over ``[-C_d, C_d]``
GRID_CELLS = 4096
#: below this the window's inside/outside split is not resolved by 64-bit thresholds
SMALLEST_EPSILON = 2.0**-40
#: relative allowance for the non-uniform ``w mod k`` picks in the variance bound
PICK_SLACK = Fraction(1) + Fraction(1, 2**40)


def round_up(value: Fraction) -> float:
    """The least double ``>= value`` (up to one ulp above)."""
    return math.nextafter(float(value), math.inf)


@dataclass(frozen=True)
class PiecewiseGrid:
    """PM on ``M`` cells, window ``m``, inside threshold ``T``: the sampler (proof page)."""

    cells: int
    window: int
    threshold: int

    @property
    def p_in(self) -> Fraction:
        return Fraction(self.threshold, TWO_64)

    @property
    def kappa(self) -> Fraction:
        """``E[y | s] = kappa c_s``: the share of the window's centre that survives."""
        outside = self.cells - self.window
        return self.p_in - (1 - self.p_in) * Fraction(self.window, outside)

    @property
    def step(self) -> Fraction:
        """``h``: the cell width in ``t`` units."""
        return 2 / (self.kappa * (self.cells - self.window))

    def outputs(self) -> NDArray[np.float64]:
        """``y_k = (2k + 1 - M) c`` for every cell ``k``: the fixed output set."""
        c = float(self.step / 2)
        centres = 2 * np.arange(self.cells, dtype=np.float64) + (1 - self.cells)
        return centres * c

    def realised_ratio(self) -> Fraction:
        """``p_max / p_min`` over every cell and window position (exact)."""
        inside_lo, inside_hi = pick_probabilities(self.window)
        outside_lo, outside_hi = pick_probabilities(self.cells - self.window)
        probs = (
            self.p_in * inside_lo,
            self.p_in * inside_hi,
            (1 - self.p_in) * outside_lo,
            (1 - self.p_in) * outside_hi,
        )
        return max(probs) / min(probs)

    def variance_parts(self) -> tuple[Fraction, Fraction]:
        """``(a, b)`` with ``Var[y | t] <= a t^2 + b`` for uniform picks (proof page)."""
        m, outside = self.window, self.cells - self.window
        kappa, h = self.kappa, self.step
        spread = h * h * (m * m - 1) / 12
        total = h * h * self.cells * (self.cells**2 - 1) / 12
        constant = kappa * h * h / 4 + kappa * spread + (1 - self.p_in) * total / outside
        return 1 / self.kappa - 1, constant

    def worst_variance(self) -> float:
        """Upper bound on ``max_t Var[y | t]`` (``t`` units), rounded up."""
        slope, constant = self.variance_parts()
        return round_up((slope + constant) * PICK_SLACK)

    def bias_bound(self) -> float:
        """``|E[y | t] - t| <= C_d 2^-48`` (proof page)."""
        return float(self.cells * self.step / 2) * 2.0**-48

    def placement(self, t: NDArray[np.float64]) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
        """``floor(u)`` and the threshold of the step up, ``floor(frac(u) 2^64)``."""
        u = (t + 1.0) * ((self.cells - self.window) / 2.0)
        base = np.floor(u)
        # frac < 1 is a double <= 1 - 2^-53: times 2^64 it stays below 2^64
        up = np.ldexp(u - base, 64).astype(np.uint64)
        top = self.cells - self.window
        return np.clip(base.astype(np.int64), 0, top), np.where(base >= top, np.uint64(0), up)

    def sample(self, t: NDArray[np.float64], words: Words) -> NDArray[np.int64]:
        """Cell index of each ``t`` from three words per row (columns 0, 1, 2)."""
        base, up = self.placement(t)
        start = base + (words[:, 0] < up)
        inside = words[:, 1] < np.uint64(self.threshold)
        offset = (words[:, 2] % np.uint64(self.window)).astype(np.int64)
        other = (words[:, 2] % np.uint64(self.cells - self.window)).astype(np.int64)
        return np.where(inside, start + offset, other + self.window * (other >= start))

    def mean_abs_error(self, t: NDArray[np.float64]) -> NDArray[np.float64]:
        """``E|y - t|`` of the implemented law at each ``t`` (uniform picks)."""
        base, up = self.placement(t)
        distance = np.abs(self.outputs()[None, :] - t[:, None])
        cumulative = np.concatenate([np.zeros((len(t), 1)), np.cumsum(distance, axis=1)], axis=1)
        total = cumulative[:, -1]
        p_in, outside = float(self.p_in), self.cells - self.window
        step_up = up.astype(np.float64) / TWO_64

        def at(start: NDArray[np.int64]) -> NDArray[np.float64]:
            start = np.minimum(start, outside)  # a step past the top has weight 0
            rows = np.arange(len(t))
            window = cumulative[rows, start + self.window] - cumulative[rows, start]
            out: NDArray[np.float64] = (
                p_in * window / self.window + (1.0 - p_in) * (total - window) / outside
            )
            return out

        result: NDArray[np.float64] = (1.0 - step_up) * at(base) + step_up * at(base + 1)
        return result


def calibrate(epsilon: float, cells: int = GRID_CELLS, split: int = 2) -> PiecewiseGrid:
    """The grid for ``epsilon``: the window share, the largest safe inside threshold.

    The share is ``1 / (e^{eps/split} + 1)``: PM's at ``split = 2``, PM-SUB's
    (``privstream.mechanisms.pm_sub``) at 3; the threshold makes the inside
    and outside densities differ by at most ``E <= e^eps`` for either.
    """
    half = math.exp(min(epsilon, 600.0) / split)
    c = (half + 1.0) / (half - 1.0) if half > 1.0 else math.inf
    share = (c - 1.0) / (2.0 * c) if math.isfinite(c) else 0.5
    return grid_for_share(epsilon, share, cells)


def grid_for_share(epsilon: float, share: float, cells: int = GRID_CELLS) -> PiecewiseGrid:
    """The grid whose window holds ``share`` of the cells, with the largest inside threshold
    ``T`` keeping the inside and outside densities within ``E <= e^eps`` (checked exactly)."""
    window = min(max(1, round(cells * share)), cells - 1)
    inside_hi = pick_probabilities(window)[1]
    outside_lo = pick_probabilities(cells - window)[0]
    odds = exp_lower_bound(epsilon) * outside_lo / inside_hi
    threshold = math.floor(odds / (1 + odds) * TWO_64)
    grid = PiecewiseGrid(cells, window, threshold)
    if epsilon < SMALLEST_EPSILON or grid.kappa <= 0:
        raise MechanismError(
            f"epsilon {epsilon:.3g} is too small for the piecewise mechanism's 64-bit "
            f"thresholds (use at least {SMALLEST_EPSILON:.3g}, or laplace)"
        )
    if grid.realised_ratio() > exp_lower_bound(epsilon):  # pragma: no cover - by construction
        raise MechanismError(f"piecewise grid at epsilon {epsilon:g} exceeds its ratio")
    return grid


class PiecewiseMechanism(UnitIntervalMechanism):
    """Wang et al.'s Piecewise Mechanism on a fixed grid (proof page)."""

    name: ClassVar[str] = "piecewise"
    words_per_value: ClassVar[int] = 3
    #: the window share is ``1 / (e^{eps/split} + 1)`` (``calibrate``)
    split: ClassVar[int] = 2

    def __init__(self, *, bounds: tuple[float, float], epsilon: float, delta: float = 0.0) -> None:
        super().__init__(bounds=bounds, epsilon=epsilon, delta=delta)
        self.grid = calibrate(self.epsilon, split=self.split)
        self._outputs = self.grid.outputs()
        self.check_reach()

    @property
    def realised_epsilon(self) -> float:
        # ratio <= E <= e^eps is checked exactly; the float log's upward margin is not a loss
        return min(self.epsilon, log_upper_bound(self.grid.realised_ratio()))

    @property
    def unit_variance(self) -> float:
        return self.grid.worst_variance()

    @property
    def reach(self) -> float:
        return float(self.grid.cells * self.grid.step / 2)

    def variance_law(self) -> VarianceLaw:
        slope, constant = self.grid.variance_parts()
        return VarianceLaw(float(slope), round_up(constant * PICK_SLACK))

    def unit_bias(self) -> float:
        return self.grid.bias_bound()

    def unit_errors(self, t: NDArray[np.float64]) -> NDArray[np.float64]:
        return self.grid.mean_abs_error(t)

    def sample(self, t: NDArray[np.float64], words: Words) -> NDArray[np.float64]:
        out: NDArray[np.float64] = self._outputs[self.grid.sample(t, words)]
        return out

    def params(self) -> dict[str, float | int | str]:
        return {
            "lower": self.lower,
            "upper": self.upper,
            "cells": self.grid.cells,
            "window": self.grid.window,
            "p_inside": float(self.grid.p_in),
            "output_bound": self.reach * self.half,
            "realised_epsilon": self.realised_epsilon,
        }

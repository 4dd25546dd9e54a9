"""Square Wave (SW) on a bounded real, for its distribution: sampled exactly on a fixed grid.

Claim: pure local ``eps``-DP for any two values, for the law actually sampled
(a declared delta is not used).

Li et al. (SIGMOD 2020) report a value ``v`` in ``[0, 1]`` as a point of
``[-b, 1 + b]``: near ``v`` (within ``b``) with a density ``e^eps`` times the
density elsewhere. Unlike the Piecewise Mechanism the report is not rescaled
to be unbiased: it stays *near the value*, which is what a histogram needs
(``estimate`` reconstructs the distribution by EM with smoothing,
``ems_histogram``). The window half-width that maximises the mutual
information of value and report is
``b = ((eps - 1) + e^-eps) / (2 (e^eps - 1 - eps))`` (``window_share``).

Calibration and sampler: PM's own grid (``privstream.mechanisms.piecewise``:
``grid_for_share`` with the share ``2b / (1 + 2b)``, ``PiecewiseGrid``):
``M`` cells, a window of ``m`` cells placed at ``v`` by a randomised
rounding, the largest inside threshold ``T`` with ``p_max / p_min <= E <=
e^eps`` checked in exact arithmetic; three 64-bit words per value, one
``words`` call. Cell ``k`` is reported as the position ``(k + 1/2) w - b'``
(``w = 1 / (M - m)``, ``b' = m w / 2``) mapped back to the field's units: the
same ``M`` outputs for every input.

The law of the implemented sampler (``law``) is exact up to the ``w mod k``
picks' ``2^-64`` non-uniformity; ``estimate`` fits the histogram with it.

Proof, step by step, with the function each step proves: docs/proofs/square-wave.md.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.base import (
    TWO_64,
    CanaryLaw,
    Mechanism,
    compact_gamma,
    log_upper_bound,
    require_finite,
)
from privstream.mechanisms.piecewise import PiecewiseGrid, grid_for_share
from privstream.mechanisms.rng import NoiseSource
from privstream.mechanisms.validation import check_bounds, check_delta, check_epsilon

#: values of ``v`` at which the worst expected error is taken
ERROR_POINTS = 129


def window_share(epsilon: float) -> float:
    """``2b / (1 + 2b)``: the share of the output range SW's window covers (Li et al., Thm. 2).

    Written with ``e^-eps`` and ``expm1`` so that large ``eps`` does not
    overflow, and as Taylor series (both sides over ``eps^2``) below 0.01,
    where they would cancel; the guarantee does not rest on this value
    (the grid's threshold is checked exactly whatever the window).
    """
    eps = min(epsilon, 600.0)
    if eps < 0.01:  # both sides cancel: their Taylor series (next terms eps^5 / 120)
        upper = 0.5 - eps / 6.0 + eps * eps / 24.0
        lower = 0.5 + eps / 6.0 + eps * eps / 24.0
        b = upper / (2.0 * lower)
    else:
        b = ((eps - 1.0) + math.exp(-eps)) / (2.0 * (math.expm1(eps) - eps))
    return 2.0 * b / (1.0 + 2.0 * b)


class SquareWaveMechanism(Mechanism):
    """Li et al.'s Square Wave on PM's grid: reports near the value (module docstring)."""

    name: ClassVar[str] = "square_wave"
    metric: ClassVar[str] = "absolute difference |y - d|"
    words_per_value: ClassVar[int] = 3

    def __init__(self, *, bounds: tuple[float, float], epsilon: float, delta: float = 0.0) -> None:
        super().__init__(epsilon=check_epsilon(epsilon), delta=check_delta(delta))
        self.lower, self.upper = check_bounds(bounds)
        self.diameter = self.upper - self.lower
        self.grid: PiecewiseGrid = grid_for_share(self.epsilon, window_share(self.epsilon))
        outside = self.grid.cells - self.grid.window
        #: report positions in ``v`` units (``[0, 1]`` is the clamped range)
        self.positions = (np.arange(self.grid.cells) + 0.5 - self.grid.window / 2.0) / outside
        self._outputs = self.lower + self.diameter * self.positions
        if not np.all(np.isfinite(self._outputs)):  # pragma: no cover - |bounds| <= 2**1002
            # and b' < M / 2 keep them finite (check_bounds); checked all the same
            raise MechanismError(
                f"square_wave: bounds [{self.lower:g}, {self.upper:g}] at epsilon "
                f"{self.epsilon:g} give reports beyond the double range; express the field "
                "in a larger unit"
            )
        if self.diameter > 0 and not np.all(np.diff(self._outputs) > 0):
            raise MechanismError(
                f"square_wave: bounds [{self.lower:g}, {self.upper:g}] are too narrow for "
                f"their magnitude: the {self.grid.cells} reports would not be distinct doubles, "
                "so estimate could not tell them apart; subtract an offset from the values "
                "(or express them in a smaller unit) so that the bounds lie nearer zero"
            )

    @property
    def realised_epsilon(self) -> float:
        # ratio <= E <= e^eps is checked exactly; the float log's upward margin is not a loss
        return min(self.epsilon, log_upper_bound(self.grid.realised_ratio()))

    def to_unit(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """``v = (clamp(x) - lo) / diam`` in ``[0, 1]`` (0 when ``lo == hi``)."""
        if self.diameter == 0.0:
            return np.zeros(len(values))
        return np.clip((np.clip(values, self.lower, self.upper) - self.lower) / self.diameter, 0, 1)

    def release(self, values: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        """Sanitize a column of finite raw values (``lo == hi``: ``lo``, without noise)."""
        column = require_finite(values, self.name)
        if self.diameter == 0.0:
            return np.full(len(column), self.lower)
        words = source.words(len(column), self.words_per_value)
        cells = self.grid.sample(2.0 * self.to_unit(column) - 1.0, words)
        out: NDArray[np.float64] = self._outputs[cells]
        return out

    def cells_of(self, released: NDArray[np.float64]) -> NDArray[np.int64]:
        """The grid cell of each released value: exactly one of the ``M`` outputs (increasing,
        distinct: checked at construction), else ``-1``."""
        if self.diameter == 0.0:
            return np.where(released == self.lower, 0, -1).astype(np.int64)
        found = np.clip(np.searchsorted(self._outputs, released), 0, self.grid.cells - 1)
        exact = self._outputs[found] == released
        return np.where(exact, found, -1).astype(np.int64)

    def law(self, v: NDArray[np.float64]) -> NDArray[np.float64]:
        """``P(cell k | v)``: one row per value of ``v`` (``[0, 1]`` units), ``M`` columns.

        The window starts at ``floor(u)`` or one cell later with the probability
        of the step up (``PiecewiseGrid.placement``, ``u = v (M - m)``); inside it
        with ``p_in`` over its ``m`` cells, elsewhere ``1 - p_in`` over ``M - m``.
        """
        grid = self.grid
        base, up = grid.placement(2.0 * np.asarray(v, dtype=np.float64) - 1.0)
        step_up = up.astype(np.float64) / TWO_64
        p_in, outside = float(grid.p_in), grid.cells - grid.window
        cells = np.arange(grid.cells)[None, :]

        def at(start: NDArray[np.int64]) -> NDArray[np.float64]:
            start = np.minimum(start, outside)[:, None]  # a step past the top has weight 0
            window = (cells >= start) & (cells < start + grid.window)
            rows: NDArray[np.float64] = np.where(window, p_in / grid.window, (1.0 - p_in) / outside)
            return rows

        rows: NDArray[np.float64] = (1.0 - step_up)[:, None] * at(base) + step_up[:, None] * at(
            base + 1
        )
        return rows

    @property
    def expected_error(self) -> float:
        """``max_v E|y - clamp(d)|`` in field units, over ``ERROR_POINTS`` values of ``v``."""
        if self.diameter == 0.0:
            return 0.0
        return self.diameter * float(self._unit_errors(np.linspace(0.0, 1.0, ERROR_POINTS)).max())

    def _unit_errors(self, v: NDArray[np.float64], power: int = 1) -> NDArray[np.float64]:
        """``E|y - v|^power`` of the implemented law at each ``v`` (``[0, 1]`` units)."""
        distance = np.abs(self.positions[None, :] - v[:, None]) ** power
        errors: NDArray[np.float64] = (self.law(v) * distance).sum(axis=1)
        return errors

    def canary_law(self, inputs: NDArray[np.float64]) -> CanaryLaw:
        """``E`` of the mean error and of the mean squared error at the (spread) canary
        inputs, exactly: not the worst case.

        No signed statistic: the reports are biased towards the middle by design.
        """
        if self.diameter == 0.0:
            return CanaryLaw(0.0)
        v = np.clip((np.asarray(inputs, dtype=np.float64) - self.lower) / self.diameter, 0.0, 1.0)
        return CanaryLaw(
            self.diameter * float(self._unit_errors(v).mean()),
            second_moment=self.diameter**2 * float(self._unit_errors(v, 2).mean()),
        )

    @property
    def gamma_lower_bound(self) -> float:
        return compact_gamma(self.diameter, self.epsilon, self.delta)

    def estimator_variance(self, n: int) -> float:
        """Of the mean rescaled from the reports (``E[y | t] = kappa t``): PM's worst variance
        on this window, in field units (the analyst's numbers are histograms, not means)."""
        half = self.diameter / 2.0
        return half * half * self.grid.worst_variance() / n

    def noise_error(
        self, inputs: NDArray[np.float64], outputs: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """``|y - clamp(d)|``: the report's distance from the mechanism's own input."""
        clamped = np.clip(np.asarray(inputs, dtype=np.float64), self.lower, self.upper)
        return np.abs(np.asarray(outputs, dtype=np.float64) - clamped)

    def worst_inputs(self, count: int) -> NDArray[np.float64]:
        """Canary inputs spread evenly over the bounds (the error depends on the input)."""
        return self.lower + self.diameter * (np.arange(count) + 0.5) / max(count, 1)

    def params(self) -> dict[str, float | int | str]:
        outside = self.grid.cells - self.grid.window
        return {
            "lower": self.lower,
            "upper": self.upper,
            "cells": self.grid.cells,
            "window": self.grid.window,
            "p_inside": float(self.grid.p_in),
            "half_width_b": self.grid.window / (2.0 * outside),
            "realised_epsilon": self.realised_epsilon,
        }


#: EM stops when one step adds less than this to the log-likelihood, or after ``EM_STEPS``
EM_TOLERANCE = 1e-3
EM_STEPS = 10_000
#: the EM works on at least this many fine bins, summed into the report's bins
FINE_BINS = 256
#: grid cells pooled into one observation (4096 cells: 1024 observations)
POOLED_CELLS = 4


def fine_bins(bins: int) -> int:
    """The fine bins the EM fits: a multiple of ``bins``, at least ``FINE_BINS``."""
    return bins * -(-FINE_BINS // bins)


def bin_law(mechanism: SquareWaveMechanism, bins: int) -> NDArray[np.float64]:
    """``A[o, j]``: ``P(observation o)`` for a value spread evenly over bin ``j`` (M/4 x bins).

    An observation pools ``POOLED_CELLS`` neighbouring cells; each bin's column
    averages the exact law over 4 evenly spaced values inside it, so a bin
    stands for values anywhere in it, not only at its centre.
    """
    points = 4
    v = (np.arange(bins * points) + 0.5) / (bins * points)
    rows = mechanism.law(v).reshape(bins, points, -1).mean(axis=1)
    out: NDArray[np.float64] = rows.reshape(bins, -1, POOLED_CELLS).sum(axis=2).T
    return out


def pooled(cell_counts: NDArray[np.int64]) -> NDArray[np.float64]:
    """The observation counts of the grid's cell counts (``POOLED_CELLS`` cells each)."""
    out: NDArray[np.float64] = cell_counts.reshape(-1, POOLED_CELLS).sum(axis=1).astype(np.float64)
    return out


def smooth(shares: NDArray[np.float64]) -> NDArray[np.float64]:
    """The binomial smoothing step of EMS: weights 1/4, 1/2, 1/4 (edges: 2/3, 1/3)."""
    if len(shares) < 3:
        return shares
    padded = np.concatenate([shares[:1], shares, shares[-1:]])
    out = (padded[:-2] + 2.0 * padded[1:-1] + padded[2:]) / 4.0
    out[0] = (2.0 * shares[0] + shares[1]) / 3.0
    out[-1] = (2.0 * shares[-1] + shares[-2]) / 3.0
    result: NDArray[np.float64] = out / out.sum()
    return result


def ems_histogram(counts: NDArray[np.float64], design: NDArray[np.float64]) -> NDArray[np.float64]:
    """EM with smoothing (Li et al., Alg. 2): fine-bin shares from observation counts.

    Deterministic: starts uniform, stops when a step adds less than
    ``EM_TOLERANCE`` to the log-likelihood, or after ``EM_STEPS``. Only
    observations with a report enter (the others add nothing).
    """
    seen = counts > 0
    weights, rows = counts[seen], design[seen]
    n = float(weights.sum())
    shares = np.full(design.shape[1], 1.0 / design.shape[1])
    likelihood = -math.inf
    for _ in range(EM_STEPS):
        fitted = rows @ shares
        step = float(weights @ np.log(fitted))
        if step - likelihood < EM_TOLERANCE:
            break
        likelihood = step
        shares = smooth(shares * (rows.T @ (weights / fitted)) / n)
    return shares

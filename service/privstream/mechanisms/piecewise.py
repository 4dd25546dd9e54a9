r"""Piecewise Mechanism (PM) on a bounded real, sampled exactly on a fixed grid.

The field value ``x`` is clamped into ``[lo, hi]`` and mapped to
``t = (x - mid) / half`` in ``[-1, 1]`` (``mid``, ``half``: centre and
half-width of the bounds). The release is ``mid + half y`` with ``y`` the
PM report, an unbiased estimate of ``t``; the mean of many releases
estimates the mean of the clamped values.

The continuous mechanism (Wang et al. 2019, Alg. 2)
---------------------------------------------------
``C = (e^{eps/2} + 1) / (e^{eps/2} - 1)``; ``y`` lies in ``[-C, C]``; a
window ``[l(t), l(t) + C - 1]`` with ``l(t) = (C + 1) t / 2 - (C - 1) / 2``
carries probability ``P_in = e^{eps/2} / (e^{eps/2} + 1)`` uniformly, the
rest of ``[-C, C]`` the remaining ``1 - P_in`` uniformly. The densities
inside and outside differ by exactly ``e^eps``, ``E[y | t] = t`` and
``Var[y | t] = t^2 / (e^{eps/2} - 1) + (e^{eps/2} + 3) / (3 (e^{eps/2} - 1)^2)``,
at worst (``|t| = 1``) ``4 e^{eps/2} / (3 (e^{eps/2} - 1)^2)``.

The sampler as implemented (``PiecewiseGrid``)
----------------------------------------------
A fixed grid of ``M = GRID_CELLS`` cells, a window of exactly ``m`` cells
(``m = round(M (C - 1) / (2 C))``, in ``[1, M - 1]``) and three 64-bit words
per value:

1. *Placement.* ``u = (t + 1)(M - m) / 2`` in ``[0, M - m]``; the window
   starts at cell ``s = floor(u) + [w0 < floor(frac(u) 2^64)]``
   (randomised rounding, so ``E[s] = u`` up to float rounding).
2. *Inside or outside.* Inside iff ``w1 < T`` (probability ``P_in = T / 2^64``).
3. *Which cell.* Inside: window cell ``s + (w2 mod m)``; outside: the
   ``(w2 mod (M - m))``-th cell not in the window, in index order.

``w mod k`` picks each residue with probability ``pi`` in
``[pi_min(k), pi_max(k)] = [floor(2^64/k), ceil(2^64/k)] / 2^64``, so, for
*every* window position, an inside cell has probability in
``P_in [pi_min(m), pi_max(m)]`` and an outside cell in ``(1 - P_in)
[pi_min(M - m), pi_max(M - m)]``. The output law given ``t`` is a mixture
over positions ``s`` (weights that depend on ``t``); each component's cell
probabilities lie between ``p_min`` and ``p_max`` (the least and largest of
those four products), so for any two inputs and any output set ``S``::

    P(S | t) <= (p_max / p_min) P(S | t')

*Realised privacy*: ``eps_real = ln(p_max / p_min)``. ``T`` is the largest
integer with ``P_in / (1 - P_in) <= E pi_min(M - m) / pi_max(m)``, ``E`` a
rational lower bound on ``e^eps`` (``base.exp_lower_bound``); construction
checks ``p_max / p_min <= E`` in exact ``Fraction`` arithmetic for the
threshold actually sampled (``realised_ratio``). The mechanism is pure
``eps``-DP; a declared delta is not used.

*Output values.* Cell ``k`` reports ``y_k = (2k + 1 - M) c`` with ``c = 1 /
(kappa (M - m))`` and ``kappa = P_in - (1 - P_in) m / (M - m)``: the cell
centres of ``[-C_d, C_d]``, ``C_d = M c``, step ``h = 2c``. The reachable
outputs are the same ``M`` numbers for every input (no floating-point side
channel: Mironov 2012).

*Unbiasedness.* With uniform picks the window centre is ``c_s = h (s - (M -
m)/2)`` and ``E[y | s] = kappa c_s`` (inside: the window's mean; outside:
the grid sums to zero, so the rest averages ``-m c_s / (M - m)``). ``E[c_s]
= h (u - (M - m)/2) = t / kappa``, hence ``E[y | t] = t``. What is left:
float rounding of ``u`` (``<= M 2^-52`` cells), of the threshold (``2^-64``)
and of ``c``, and the non-uniform picks (each cell within ``2^-64`` of its
uniform share, ``|y| <= C_d``): ``|E[y | t] - t| <= C_d 2^-48``
(``bias_bound``; ``tests/unit/mechanisms/test_piecewise.py`` computes the
exact expectation of the implemented law).

*Variance.* ``E[y^2 | s] = kappa (c_s^2 + v_m) + (1 - P_in) S_2 / (M - m)``
with ``v_m = h^2 (m^2 - 1) / 12`` (spread inside the window) and ``S_2 = h^2
M (M^2 - 1) / 12`` (sum of all ``y_k^2``); the randomised placement adds
``h^2 f (1 - f)`` to ``E[c_s^2]`` (``f = frac(u)``). So::

    Var[y | t] = t^2 (1/kappa - 1) + kappa h^2 f (1 - f) + kappa v_m
                 + (1 - P_in) S_2 / (M - m)

bounded over ``t`` by taking ``t^2 = 1`` and ``f (1 - f) = 1/4``
(``worst_variance``, ``(1 + 2^-40)`` for the non-uniform picks). At ``M =
4096`` it is within 1% of the continuous ``4 e^{eps/2} / (3 (e^{eps/2} -
1)^2)``. The estimator of the mean adds ``half^2 worst_variance / n``.

*Error* in the field's metric ``|y - d|`` (``d`` the clamped value):
``half max_t E|y - t|``, evaluated exactly on the implemented law at 129
values of ``t`` (continuous PM: a quadratic in ``t``, largest at ``|t| =
1``). Lower bound, as for every real field (thesis Theorem 5.3):
``gamma >= (1 - delta) diam / (2 (1 + e^eps))``.

References
----------
* N. Wang, X. Xiao, Y. Yang, J. Zhao, S. C. Hui, H. Shin, J. Shin, G. Yu,
  *Collecting and Analyzing Multidimensional Data with Local Differential
  Privacy*, ICDE 2019 (PM: Alg. 2, Lemma 1).
* I. Mironov, *On significance of the least significant bits for
  differential privacy*, CCS 2012.
* M. Jazbec, *Splošna definicija diferencirane zasebnosti*, 2018, Thm. 5.3.
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
    """PM on ``M`` cells, window ``m``, inside threshold ``T``: the sampler (module docstring)."""

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
        """``(a, b)`` with ``Var[y | t] <= a t^2 + b`` for uniform picks (module docstring)."""
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
        """``|E[y | t] - t| <= C_d 2^-48`` (module docstring)."""
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


def calibrate(epsilon: float, cells: int = GRID_CELLS) -> PiecewiseGrid:
    """The grid for ``epsilon``: PM's window share, the largest safe inside threshold."""
    half = math.exp(min(epsilon, 600.0) / 2.0)
    c = (half + 1.0) / (half - 1.0) if half > 1.0 else math.inf
    share = (c - 1.0) / (2.0 * c) if math.isfinite(c) else 0.5
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
    """Wang et al.'s Piecewise Mechanism on a fixed grid (module docstring)."""

    name: ClassVar[str] = "piecewise"
    words_per_value: ClassVar[int] = 3

    def __init__(self, *, bounds: tuple[float, float], epsilon: float, delta: float = 0.0) -> None:
        super().__init__(bounds=bounds, epsilon=epsilon, delta=delta)
        self.grid = calibrate(self.epsilon)
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

    def variance_law(self) -> tuple[float, float]:
        slope, constant = self.grid.variance_parts()
        return float(slope), round_up(constant * PICK_SLACK)

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

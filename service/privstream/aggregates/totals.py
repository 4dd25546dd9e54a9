"""One noisy integer per cell: ``total + Z``, ``Z`` discrete Laplace, and its guarantee.

Claim: for a unit whose removal moves the cells' totals by at most
``Delta_1`` in L1 (``Sensitivity.used``), releasing every cell's total plus
independent discrete Laplace noise of parameter ``t`` is ``(eps, delta)``-DP.

Calibration (``calibrate_total``): one cell with an integer shift and
``delta > 0`` uses the exact profile (``discrete_laplace.calibrate``);
otherwise ``t = Delta_1 / eps_c`` with ``eps_c = eps (1 - 2^-40) - c *
EPSILON_SLACK`` for ``c`` cells (each realised sampler law adds its
``4.0001 xi`` of slack) and the release is pure (realised delta 0).

Error: ``E|Z| = 2a/(1 - a^2)``, ``Var Z = 2a/(1-a)^2`` (``a = e^(-1/t)``);
the 95% interval is ``total +- k`` with ``k`` the least integer with
``P(|Z| <= k) >= 0.95``: exact coverage of the bounded total, whatever it is.

Sampler contract: ``draw`` calls ``DiscreteLaplace.sample`` once per
release (exact integer thresholds, one row per cell). Proof, step by
step: docs/proofs/aggregates.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from privstream.aggregates.sensitivity import Sensitivity
from privstream.errors import MechanismError
from privstream.mechanisms.discrete_laplace import (
    EPSILON_SLACK,
    MAX_SCALE,
    DiscreteLaplace,
    calibrate,
    calibration_epsilon,
)
from privstream.mechanisms.rng import NoiseSource

#: the confidence level of the released intervals
LEVEL = 0.95


def calibrate_total(
    epsilon: float, delta: float, sensitivity: Sensitivity, cells: int
) -> DiscreteLaplace:
    """The discrete Laplace noise of one total over ``cells`` cells (module docstring)."""
    shift = sensitivity.used
    if delta > 0.0 and cells == 1 and sensitivity.integer_shift:
        return calibrate(epsilon, delta, int(shift))
    eps_c = calibration_epsilon(epsilon, math.ceil(shift)) - (cells - 1) * EPSILON_SLACK
    if eps_c <= epsilon / 2.0 or shift / eps_c > MAX_SCALE:
        raise MechanismError(
            f"epsilon {epsilon:g} over {cells} cells at sensitivity {shift:g}: the noise "
            f"parameter {shift / max(eps_c, 1e-300):.3g} is beyond 2**40 or the sampler's slack "
            "beyond half of epsilon; raise epsilon or declare fewer keys"
        )
    return DiscreteLaplace(shift / eps_c)


def half_width(noise: DiscreteLaplace, level: float = LEVEL) -> int:
    """The least integer ``k`` with ``P(|Z| <= k) >= level`` (``= 1 - 2 a^(k+1) / (1+a)``)."""
    a = noise.a
    guess = max(0, math.ceil(-noise.t * math.log((1.0 - level) * (1.0 + a) / 2.0)) - 1)

    def covered(k: int) -> bool:
        return 1.0 - 2.0 * math.exp(-(k + 1) / noise.t) / (1.0 + a) >= level

    while guess > 0 and covered(guess - 1):
        guess -= 1
    while not covered(guess):
        guess += 1
    return guess


@dataclass(frozen=True)
class NoisyTotal:
    """A per-cell integer total (a count, or a sum on the grid ``step``) released with noise."""

    #: "count" or "sum": what the integer totals
    part: str
    epsilon: float
    delta: float
    sensitivity: Sensitivity
    cells: int
    #: value units per integer unit (1 for counts; the grid step of a sum)
    step: float
    noise: DiscreteLaplace

    @classmethod
    def build(
        cls,
        part: str,
        epsilon: float,
        delta: float,
        sensitivity: Sensitivity,
        cells: int,
        step: float = 1.0,
    ) -> NoisyTotal:
        noise = calibrate_total(epsilon, delta, sensitivity, cells)
        return cls(part, epsilon, delta, sensitivity, cells, step, noise)

    @property
    def realised_delta(self) -> float:
        """The delta the noise meets: 0 unless the exact one-cell profile was used."""
        exact = self.delta > 0.0 and self.cells == 1 and self.sensitivity.integer_shift
        return self.delta if exact else 0.0

    @property
    def scale(self) -> float:
        """The noise parameter ``t`` in value units."""
        return self.noise.t * self.step

    @property
    def expected_error(self) -> float:
        """``E|Z|`` in value units."""
        return self.noise.mean_abs * self.step

    @property
    def std_error(self) -> float:
        return math.sqrt(self.noise.variance) * self.step

    @property
    def half_width(self) -> int:
        """The 95% half-width in integer units."""
        return half_width(self.noise)

    def draw(self, source: NoiseSource, n: int) -> NDArray[np.int64]:
        """``n`` noise integers, one per cell, from one ``words`` call."""
        return self.noise.sample(source, n)

    def describe(self) -> dict[str, float | int | str]:
        s = self.sensitivity
        return {
            "part": self.part,
            "epsilon": self.epsilon,
            "delta": self.realised_delta,
            "sensitivity": s.used * self.step,
            "sensitivity_independent": s.independent * self.step,
            "sensitivity_naive": s.naive * self.step,
            "scale": self.scale,
            "expected_error": self.expected_error,
            "std_error": self.std_error,
            "ci95_half_width": self.half_width * self.step,
            "cells": self.cells,
        }

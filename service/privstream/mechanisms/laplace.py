r"""Laplace mechanism on a bounded real interval.

Claim: ``(epsilon, delta)``-DP for any two raw values of the field.

Release ``Y_d = g (round(clamp(d, lo, hi) / g) + Z)``: the clamped value on
the power-of-two grid ``g Z`` plus a discrete Laplace integer ``Z``, never a
floating-point Laplace draw (Mironov 2012).

Calibration (``diam = hi - lo``, the sensitivity after clamping): the
continuous scale ``b`` picks the grid, ``tight`` (default)
``b = diam / (eps - 2 ln(1 - delta))``, ``thesis`` (Jazbec 2018, Ex. 4.9)
``b = diam / (eps - ln(1 - delta))``; the discrete noise is then calibrated
against the rounded sensitivity ``Delta = round(hi/g) - round(lo/g)`` with the
sampler's certified profile (``privstream.mechanisms.discrete_laplace``).

Sampler contract: ``release`` calls ``source.words`` once per column; the
thresholds are exact integers, within the calibration's ``~4e-12`` slack.

Error ``g (E|Z| + P(Z = 0) / 2)``; lower bound ``(1 - delta) diam / (2 (1 +
e^eps))`` (Thm. 5.3); variance of the mean ``g^2 Var(Z) / n``.

Proof, step by step, with the function each step proves: docs/proofs/laplace.md.
"""

from __future__ import annotations

import contextlib
import math
from typing import ClassVar, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.base import Mechanism, compact_gamma, require_finite
from privstream.mechanisms.discrete_laplace import (
    DiscreteLaplace,
    calibrate,
    calibration_epsilon,
    discrete_laplace_cdf,
)
from privstream.mechanisms.estimation import (
    HistogramEstimate,
    LatticeNoise,
    MeanEstimate,
    column_histogram,
    constant_lattice,
    mean_estimate,
    require_records,
)
from privstream.mechanisms.grid import (
    from_grid,
    granularity,
    grid_sensitivity,
    narrow_bounds_message,
    to_grid,
)
from privstream.mechanisms.rng import NoiseSource
from privstream.mechanisms.validation import check_bounds, check_delta, check_epsilon
from privstream.mechanisms.variance_law import VarianceLaw

Calibration = Literal["tight", "thesis"]


def laplace_scale(diam: float, epsilon: float, delta: float, calibration: Calibration) -> float:
    """The continuous Laplace scale ``b`` for sensitivity ``diam`` at (epsilon, delta)."""
    factor = 2.0 if calibration == "tight" else 1.0
    return diam / (epsilon - factor * math.log1p(-delta))


class LaplaceMechanism(Mechanism):
    """Clamp into ``[lo, hi]``, round to the grid, add calibrated discrete Laplace noise."""

    name: ClassVar[str] = "laplace"
    metric: ClassVar[str] = "absolute difference |y - d|"

    def __init__(
        self,
        *,
        bounds: tuple[float, float],
        epsilon: float,
        delta: float = 0.0,
        calibration: Calibration = "tight",
    ) -> None:
        super().__init__(epsilon=check_epsilon(epsilon), delta=check_delta(delta))
        self.lower, self.upper = check_bounds(bounds)
        self.calibration: Calibration = calibration
        self.diameter = self.upper - self.lower
        self.continuous_scale = laplace_scale(self.diameter, self.epsilon, self.delta, calibration)
        self.granularity = 0.0
        self.grid_sensitivity = 0
        self.noise: DiscreteLaplace | None = None
        if self.diameter > 0.0:
            magnitude = max(abs(self.lower), abs(self.upper))
            self.granularity = granularity(self.continuous_scale, magnitude, self.diameter)
            self.grid_sensitivity = grid_sensitivity(self.lower, self.upper, self.granularity)
            if self.grid_sensitivity == 0:
                raise MechanismError(
                    narrow_bounds_message(self.name, self.lower, self.upper, self.granularity)
                )
            self.noise = self._calibrate()

    def _calibrate(self) -> DiscreteLaplace:
        sens = self.grid_sensitivity
        if self.calibration == "tight":
            noise = calibrate(self.epsilon, self.delta, sens)
        else:
            eps_c = calibration_epsilon(self.epsilon, sens)
            noise = DiscreteLaplace(sens / (eps_c - math.log1p(-self.delta)))
        if noise.certified_delta(self.epsilon, sens) > self.delta:
            raise MechanismError(
                f"the {self.calibration} calibration does not hold for the sampler on the grid "
                f"at epsilon {self.epsilon:g}; use calibration 'tight'"
            )
        return noise

    @property
    def scale(self) -> float:
        """Effective Laplace scale ``g t`` of the noise actually added."""
        return 0.0 if self.noise is None else self.granularity * self.noise.t

    @property
    def expected_error(self) -> float:
        if self.noise is None:
            return 0.0
        return self.granularity * (self.noise.mean_abs + self.noise.p_zero / 2.0)

    @property
    def gamma_lower_bound(self) -> float:
        return compact_gamma(self.diameter, self.epsilon, self.delta)

    def variance_law(self) -> VarianceLaw:
        """Flat: the noise is the same at every value (``t`` units, ``half`` = 1)."""
        return VarianceLaw(0.0, self._flat_variance())

    def _flat_variance(self) -> float:
        """The variance of one report in ``t`` units (``half`` = 1)."""
        half = (self.upper - self.lower) / 2.0
        noise = self.noise
        if half <= 0.0 or noise is None:  # zero width: no noise
            return 0.0
        square = half * half
        if math.isfinite(square) and square > 0.0:
            with contextlib.suppress(OverflowError, ZeroDivisionError):
                return self.estimator_variance(1) / square
        # bounds near the double range (g^2 or half^2 beyond it), or so narrow that half^2
        # underflows to 0: g / half before squaring (an overflow is an infinite variance)
        try:
            return (self.granularity / half) ** 2 * noise.variance
        except OverflowError:
            return math.inf

    def estimator_variance(self, n: int) -> float:
        if self.noise is None:
            return 0.0
        return self.granularity**2 * self.noise.variance / n

    def params(self) -> dict[str, float | int | str]:
        return {
            "scale": self.scale,
            "lower": self.lower,
            "upper": self.upper,
            "calibration": self.calibration,
            "granularity": self.granularity,
            "grid_sensitivity": self.grid_sensitivity,
        }

    def clamp(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """Project raw values into the declared bounds."""
        return np.clip(values, self.lower, self.upper)

    def release(self, values: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        """Sanitize a column of finite raw values; outputs are multiples of ``granularity``."""
        column = require_finite(values, self.name)
        clamped = self.clamp(column)
        if self.noise is None:  # zero width: the one value, never the input's sign of zero
            return np.full(len(clamped), self.lower)
        noise = self.noise.sample(source, len(clamped))
        return from_grid(to_grid(clamped, self.granularity) + noise, self.granularity)

    def noise_error(
        self, inputs: NDArray[np.float64], outputs: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """``|y - g round(clamp(d) / g)| = g |Z|`` (exact: both sides are on the grid)."""
        clamped = self.clamp(np.asarray(inputs, dtype=np.float64))
        if self.noise is None:
            return np.zeros(len(clamped))
        return np.abs(outputs - from_grid(to_grid(clamped, self.granularity), self.granularity))


# --- analyst side: the Laplace release in the terms of ``estimation`` ---------------------------


def estimate_mean(
    mechanism: LaplaceMechanism, count: int, mean: float, variance: float
) -> MeanEstimate:
    """Mean of ``count`` Laplace releases, from their sample mean and variance (ddof 1).

    ``Y = g (round(clamp(d)/g) + Z)`` with ``E[Z] = 0``: the estimand is the mean
    of the clamped values, biased by grid rounding of at most ``g/2``. Noise
    variance of the mean ``g^2 Var(Z) / n`` (``estimator_variance``).
    """
    noise = mechanism.estimator_variance(require_records(count))
    return mean_estimate(count, mean, variance, noise, mechanism.granularity / 2.0)


def lattice_noise(mechanism: LaplaceMechanism) -> LatticeNoise:
    """The Laplace mechanism on its grid: ``y = g (round(clamp(d)/g) + Z)``."""
    if mechanism.noise is None:  # lo == hi: every release is lo
        return constant_lattice(mechanism.lower)
    g = mechanism.granularity
    first, last = (int(to_grid(np.array([b]), g)[0]) for b in (mechanism.lower, mechanism.upper))

    def noiseless(values: NDArray[np.float64]) -> NDArray[np.int64]:
        return to_grid(mechanism.clamp(np.asarray(values, dtype=np.float64)), g)

    noise = mechanism.noise
    return LatticeNoise(
        g, 0.0, first, last, discrete_laplace_cdf(noise.t), math.sqrt(noise.variance), noiseless
    )


def estimate_histogram(
    mechanism: LaplaceMechanism, released: ArrayLike, bins: int = 10
) -> HistogramEstimate:
    """``LatticeHistogram`` of a whole column of Laplace releases at once."""
    return column_histogram(lattice_noise(mechanism), released, bins)

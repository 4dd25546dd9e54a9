"""Discrete Laplace (geometric) mechanism for bounded integer counters.

Claim: ``(epsilon, delta)``-DP for any two raw integers of the field.

Release ``clamp(d, lo, hi) + Z`` (integers), ``Z`` discrete Laplace noise:
integers in, integers out, no floating-point side channel.

Calibration: ``Z`` is calibrated to the sensitivity ``Delta = hi - lo`` with
its exact privacy profile (``privstream.mechanisms.discrete_laplace``): pure
eps-DP uses ``t = Delta / eps``; with ``delta > 0`` the least ``t`` whose exact
divergence is at most ``delta`` (both at the sampler's slacked epsilon).

Sampler contract: ``release`` calls ``DiscreteLaplace.sample`` once per
column (exact integer thresholds).

Error ``E|Z| = 2a/(1 - a^2)``; lower bound the larger of Theorems 5.3 and 5.5;
variance of the mean ``2a / ((1 - a)^2 n)``.

Proof, step by step, with the function each step proves:
docs/proofs/integer-laplace.md.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from privstream.mechanisms.base import Mechanism, compact_gamma, finite_gamma, require_finite
from privstream.mechanisms.discrete_laplace import DiscreteLaplace, calibrate, discrete_laplace_cdf
from privstream.mechanisms.estimation import (
    HistogramEstimate,
    LatticeNoise,
    MeanEstimate,
    column_histogram,
    mean_estimate,
    no_noise_cdf,
    require_records,
)
from privstream.mechanisms.rng import NoiseSource
from privstream.mechanisms.validation import check_delta, check_epsilon, check_integer_bounds
from privstream.mechanisms.variance_law import VarianceLaw


class IntegerLaplaceMechanism(Mechanism):
    """Clamp an integer into ``[lo, hi]`` and add discrete Laplace noise."""

    name: ClassVar[str] = "discrete_laplace"
    metric: ClassVar[str] = "absolute difference |y - d|"

    def __init__(self, *, bounds: tuple[int, int], epsilon: float, delta: float = 0.0) -> None:
        super().__init__(epsilon=check_epsilon(epsilon), delta=check_delta(delta))
        self.lower, self.upper = check_integer_bounds(bounds)
        self.sensitivity = self.upper - self.lower
        self.noise: DiscreteLaplace | None = None
        if self.sensitivity > 0:
            self.noise = calibrate(self.epsilon, self.delta, self.sensitivity)

    @property
    def expected_error(self) -> float:
        return 0.0 if self.noise is None else self.noise.mean_abs

    @property
    def gamma_lower_bound(self) -> float:
        return max(
            compact_gamma(self.sensitivity, self.epsilon, self.delta),
            finite_gamma(self.sensitivity, self.epsilon, self.delta),
        )

    def estimator_variance(self, n: int) -> float:
        return 0.0 if self.noise is None else self.noise.variance / n

    def variance_law(self) -> VarianceLaw:
        """Flat, in ``t`` units of ``[lo, hi]`` (``half = (hi - lo) / 2``): what ``auto``
        compares with the real menu's laws."""
        half = self.sensitivity / 2.0
        return VarianceLaw(0.0, self.estimator_variance(1) / (half * half) if half else 0.0)

    def params(self) -> dict[str, float | int | str]:
        t = 0.0 if self.noise is None else self.noise.t
        return {"scale": t, "lower": self.lower, "upper": self.upper}

    def release(self, values: NDArray[np.int64], source: NoiseSource) -> NDArray[np.int64]:
        column = np.asarray(values)
        if column.dtype.kind == "f":
            require_finite(column, self.name)
        clamped = np.clip(column.astype(np.int64), self.lower, self.upper)
        if self.noise is None:
            return clamped
        return clamped + self.noise.sample(source, len(clamped))

    def noise_error(
        self, inputs: NDArray[np.int64], outputs: NDArray[np.int64]
    ) -> NDArray[np.float64]:
        """``|y - clamp(d)| = |Z|``."""
        clamped = np.clip(np.asarray(inputs, dtype=np.int64), self.lower, self.upper)
        error: NDArray[np.float64] = np.abs(outputs - clamped).astype(np.float64)
        return error


# --- analyst side: the release in the terms of ``estimation`` ----------------------------------


def lattice_noise(mechanism: IntegerLaplaceMechanism) -> LatticeNoise:
    """Integers in, integers out: ``y = clamp(d) + Z`` on the lattice of step 1."""

    def noiseless(values: NDArray[np.float64]) -> NDArray[np.int64]:
        rounded = np.rint(np.asarray(values, dtype=np.float64))
        clipped: NDArray[np.int64] = np.clip(rounded, mechanism.lower, mechanism.upper).astype(
            np.int64
        )
        return clipped

    noise = mechanism.noise
    if noise is None:
        return LatticeNoise(
            1.0, 0.0, mechanism.lower, mechanism.upper, no_noise_cdf, 0.0, noiseless, True
        )
    return LatticeNoise(
        1.0,
        0.0,
        mechanism.lower,
        mechanism.upper,
        discrete_laplace_cdf(noise.t),
        math.sqrt(noise.variance),
        noiseless,
        True,
    )


def estimate_mean(
    mechanism: IntegerLaplaceMechanism, count: int, mean: float, variance: float
) -> MeanEstimate:
    """Mean of ``count`` releases, from their sample mean and variance (ddof 1).

    ``Y = clamp(d) + Z`` with ``E[Z] = 0``: an unbiased estimate of the mean of
    the clamped values (no rounding); noise variance ``Var(Z) / n``.
    """
    noise = mechanism.estimator_variance(require_records(count))
    return mean_estimate(count, mean, variance, noise, 0.0)


def estimate_histogram(
    mechanism: IntegerLaplaceMechanism, released: ArrayLike, bins: int = 10
) -> HistogramEstimate:
    """``LatticeHistogram`` of a whole column of releases; ``bins`` >= the number of values
    gives one bin per value, where the deconvolution model is exact."""
    return column_histogram(lattice_noise(mechanism), released, bins)

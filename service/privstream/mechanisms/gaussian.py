"""Gaussian mechanism for bounded reals on the integer grid, and the Gaussian calibrations.

Claim: ``(epsilon, delta)``-DP (``delta > 0``) for any two raw values of the field.

Release ``Y_d = g (i(d) + Z)``: ``i(d)`` the grid index of the clamped value,
``Z ~ N_Z(0, sigma_Z^2)`` a discrete Gaussian integer, ``g`` a power of two
(``privstream.mechanisms.grid``); continuous noise never meets a raw value in
floating point (Mironov 2012). The vector version is ``vector_gaussian``.

Calibration: the continuous sigma picks the grid, ``classical`` (Dwork & Roth
2014, Thm. A.1) ``sqrt(2 ln(1.25/delta)) Delta / eps``, refused for
``eps >= 1``, or ``analytic`` (Balle & Wang 2018, Thm. 8), the least sigma
whose exact profile meets delta. On the grid the integer sensitivity is
``Delta_Z = floor(hi/g) - ceil(lo/g) <= diam/g`` and ``sigma_Z`` is certified on
the exact profile of the sampler's own table (``discrete_gaussian``).

Sampler contract: ``release`` calls ``DiscreteGaussianSampler.sample`` once per
column, two 64-bit words per value against integer thresholds.

Error ``g sum_z q(z) |z + r_max|`` (exact over the sampler's pmf); lower bound
``(1 - delta) diam / (2 (1 + e^eps))`` (Thm. 5.3); variance of the mean
``g^2 Var(Z) / n``.

Proof, step by step, with the function each step proves: docs/proofs/gaussian.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.base import Mechanism, compact_gamma
from privstream.mechanisms.discrete_gaussian import (
    MAX_TABLE_SIGMA,
    WORDS_PER_SAMPLE,
    DiscreteGaussianSampler,
    calibrate_discrete_gaussian,
    calibrated_sampler,
    sampler_for,
    smallest_sigma,
)
from privstream.mechanisms.estimation import (
    HistogramEstimate,
    LatticeNoise,
    MeanEstimate,
    column_histogram,
    constant_lattice,
    mean_estimate,
    no_noise_cdf,
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

Calibration = Literal["analytic", "classical"]


def _log_ndtr(x: float) -> float:
    """``ln Phi(x)`` for the standard normal CDF, accurate in the far left tail."""
    if x > -30.0:
        return math.log(0.5 * math.erfc(-x / math.sqrt(2.0)))
    inv = 1.0 / (x * x)
    series = 1.0 - inv * (1.0 - 3.0 * inv * (1.0 - 5.0 * inv * (1.0 - 7.0 * inv)))
    return -0.5 * x * x - math.log(-x) - 0.5 * math.log(2.0 * math.pi) + math.log(series)


def analytic_gaussian_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """Exact ``delta(eps)`` of ``N(0, sigma^2)`` at shift ``sensitivity`` (Balle & Wang 2018)."""
    if sensitivity <= 0.0:
        return 0.0
    if sigma <= 0.0:
        return 1.0
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    first = math.exp(_log_ndtr(a - b))
    second = math.exp(min(epsilon + _log_ndtr(-a - b), 0.0))
    return max(first - second, 0.0)


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest sigma with ``analytic_gaussian_delta <= delta`` (relative 1e-10, safe side)."""
    start = math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon
    return smallest_sigma(
        lambda s: analytic_gaussian_delta(epsilon, s, sensitivity), delta, start, rtol=1e-10
    )


def classical_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """``sqrt(2 ln(1.25/delta)) Delta / eps``; refused for ``eps >= 1`` (not proved there)."""
    if epsilon >= 1.0:
        raise MechanismError(
            f"the classical Gaussian calibration sqrt(2 ln(1.25/delta)) Delta/eps holds only "
            f"for epsilon < 1 (got {epsilon:g}); use calibration 'analytic' "
            "(Balle & Wang 2018), exact for every epsilon"
        )
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


def require_positive_delta(delta: float, what: str) -> None:
    """Gaussian noise cannot give pure epsilon-DP."""
    if delta <= 0.0:
        raise MechanismError(
            f"the {what} needs delta > 0 (Gaussian noise is never pure epsilon-DP); "
            "set delta, e.g. 1e-6, or use the laplace mechanism"
        )


def check_calibration(calibration: str, allowed: tuple[str, ...]) -> None:
    """MechanismError unless ``calibration`` is one of ``allowed``."""
    if calibration not in allowed:
        raise MechanismError(
            f"calibration {calibration!r} is unknown; use one of {', '.join(allowed)}"
        )


def _check_table(sigma_grid: float, epsilon: float) -> float:
    """``sigma_grid``, or MechanismError if the sampler's table cannot serve it.

    The grid is at most half the domain wide, so ``sigma_grid`` is at least
    about ``2 sigma / diam`` and grows as ``1/epsilon``: the smallest epsilon
    served is about ``epsilon sigma_grid / 2^15``.
    """
    if sigma_grid > MAX_TABLE_SIGMA:
        smallest = epsilon * sigma_grid / MAX_TABLE_SIGMA
        raise MechanismError(
            f"epsilon {epsilon:.3g} is too small for the gaussian mechanism on this field: the "
            f"noise would span {sigma_grid:.3g} grid steps, beyond the sampler's table "
            f"({MAX_TABLE_SIGMA:.0f}); the smallest epsilon it serves here is about "
            f"{smallest:.2g}: raise epsilon or use the laplace mechanism"
        )
    return sigma_grid


class GaussianMechanism(Mechanism):
    """Clamp into ``[lo, hi]``, move to the grid, add discrete Gaussian noise."""

    name: ClassVar[str] = "gaussian"
    metric: ClassVar[str] = "absolute difference |y - d|"

    def __init__(
        self,
        *,
        bounds: tuple[float, float],
        epsilon: float,
        delta: float,
        calibration: Calibration = "analytic",
    ) -> None:
        super().__init__(epsilon=check_epsilon(epsilon), delta=check_delta(delta))
        require_positive_delta(self.delta, "gaussian mechanism")
        check_calibration(calibration, ("analytic", "classical"))
        self.calibration: Calibration = calibration
        self.lower, self.upper = check_bounds(bounds)
        self.diameter = self.upper - self.lower
        self._sampler: DiscreteGaussianSampler | None = None
        eps, dlt = self.epsilon, self.delta
        if calibration == "classical":
            self.sigma_continuous = classical_gaussian_sigma(eps, dlt, self.diameter)
        elif self.diameter > 0.0:
            self.sigma_continuous = analytic_gaussian_sigma(eps, dlt, self.diameter)
        else:
            self.sigma_continuous = 0.0
        if self.diameter == 0.0:  # one possible value: release it, (0, 0)-DP
            self.granularity = 0.0
            self._index_range = (0, 0)
            self.sensitivity_grid = 0
            self._offset = 0.0
            return
        g = granularity(self.sigma_continuous, max(abs(self.lower), abs(self.upper)), self.diameter)
        self.granularity = g
        first, last = math.ceil(self.lower / g), math.floor(self.upper / g)
        if first <= last:  # clamp onto the grid points inside [lo, hi]
            self.sensitivity_grid = grid_sensitivity(first * g, last * g, g)
            inside = 0.5 if last > first else 0.0
            self._offset = max(inside, first - self.lower / g, self.upper / g - last)
        else:  # no grid point inside: plain rounding, indices differ by at most 1
            first, last = round(self.lower / g), round(self.upper / g)
            self.sensitivity_grid = grid_sensitivity(self.lower, self.upper, g)
            self._offset = 0.5
        self._index_range = (first, last)
        if self.sensitivity_grid == 0:  # a constant release would claim noise it never adds
            raise MechanismError(narrow_bounds_message(self.name, self.lower, self.upper, g))
        sens = self.sensitivity_grid
        if calibration == "analytic":
            start = calibrate_discrete_gaussian(eps, dlt, sens)
            _check_table(start, eps)
            self._sampler = calibrated_sampler(eps, dlt, lambda smp: smp.delta(eps, sens), start)
        else:
            sampler = sampler_for(_check_table(classical_gaussian_sigma(eps, dlt, sens), eps))
            if sampler.delta(eps, sens) > dlt:  # pragma: no cover -- not observed for eps < 1
                raise MechanismError(
                    "the classical sigma does not certify (epsilon, delta) on the integer grid; "
                    "use calibration 'analytic'"
                )
            self._sampler = sampler

    @property
    def sigma_grid(self) -> float:
        """sigma of the integer noise, in grid steps (0 when no noise is needed)."""
        return self._sampler.sigma if self._sampler is not None else 0.0

    @property
    def sigma(self) -> float:
        """Scale of the released noise in the value's units, ``g sigma_Z``."""
        return self.granularity * self.sigma_grid

    @property
    def delta_achieved(self) -> float:
        """The exact delta at epsilon of the sampler's table (``<= delta``)."""
        if self._sampler is None:
            return 0.0
        return self._sampler.delta(self.epsilon, self.sensitivity_grid)

    @property
    def expected_error(self) -> float:
        if self._sampler is None:
            return self.granularity * self._offset
        return self.granularity * self._sampler.mean_abs(self._offset)

    @property
    def gamma_lower_bound(self) -> float:
        return compact_gamma(self.diameter, self.epsilon, self.delta)

    def estimator_variance(self, n: int) -> float:
        if self._sampler is None:
            return 0.0
        return self.granularity**2 * self._sampler.variance / n

    def params(self) -> dict[str, float | int | str]:
        return {
            "sigma": self.sigma,
            "sigma_continuous": self.sigma_continuous,
            "granularity": self.granularity,
            "sensitivity_grid": self.sensitivity_grid,
            "delta_achieved": self.delta_achieved,
            "lower": self.lower,
            "upper": self.upper,
            "calibration": self.calibration,
        }

    def grid_indices(self, values: NDArray[np.float64]) -> NDArray[np.int64]:
        """Clamp into ``[lo, hi]`` and onto the grid points inside: the noiseless indices."""
        clamped = np.clip(values, self.lower, self.upper)
        return np.clip(to_grid(clamped, self.granularity), *self._index_range)

    def release(self, values: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        """Sanitize a column of finite raw values."""
        column = np.asarray(values, dtype=np.float64)
        if column.ndim != 1:
            raise MechanismError(f"{self.name}: expected a 1-D column, got shape {column.shape}")
        words = source.words(len(column), WORDS_PER_SAMPLE if self._sampler else 0)
        if not np.all(np.isfinite(column)):
            raise MechanismError(f"{self.name}: the column holds a value that is not finite")
        if self.diameter == 0.0:
            return np.full(len(column), self.lower)
        indices = self.grid_indices(column)
        if self._sampler is not None:
            indices = indices + self._sampler.sample(words)
        return from_grid(indices, self.granularity)

    def noise_error(
        self, inputs: NDArray[np.float64], outputs: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """``|y - g index(d)|`` with ``index`` the noiseless grid index: ``g |Z|``."""
        column = np.asarray(inputs, dtype=np.float64)
        if self.diameter == 0.0:
            return np.zeros(len(column))
        return np.abs(outputs - from_grid(self.grid_indices(column), self.granularity))


# --- analyst side: the release in the terms of ``estimation`` ----------------------------------


def discrete_gaussian_cdf(
    sampler: DiscreteGaussianSampler,
) -> Callable[[NDArray[np.int64]], NDArray[np.float64]]:
    """Vectorised ``P(Z <= k)`` under the sampler's exact table pmf (support ``-T..T``)."""
    cumulative = np.cumsum(sampler.pmf)
    support = sampler.support

    def cdf(k: NDArray[np.int64]) -> NDArray[np.float64]:
        z = np.asarray(k, dtype=np.int64)
        position = np.clip(z + support, 0, 2 * support)
        out = np.where(z < -support, 0.0, np.where(z >= support, 1.0, cumulative[position]))
        return np.asarray(out, dtype=np.float64)

    return cdf


def lattice_noise(mechanism: GaussianMechanism) -> LatticeNoise:
    """The real Gaussian mechanism on its grid: ``y = g (index(d) + Z)``, ``Z ~ N_Z(0, s^2)``."""
    sampler = mechanism._sampler
    if mechanism.diameter == 0.0:  # every release is lo
        return constant_lattice(mechanism.lower)
    g = mechanism.granularity
    first, last = mechanism._index_range

    def noiseless(values: NDArray[np.float64]) -> NDArray[np.int64]:
        return mechanism.grid_indices(np.asarray(values, dtype=np.float64))

    if sampler is None:  # no grid step between the bounds: the index is released as is
        return LatticeNoise(g, 0.0, first, last, no_noise_cdf, 0.0, noiseless)
    return LatticeNoise(
        g, 0.0, first, last, discrete_gaussian_cdf(sampler), math.sqrt(sampler.variance), noiseless
    )


def estimate_mean(
    mechanism: GaussianMechanism, count: int, mean: float, variance: float
) -> MeanEstimate:
    """Mean of ``count`` Gaussian releases, from their sample mean and variance (ddof 1).

    ``Y = g (index(clamp(d)) + Z)`` with ``E[Z] = 0``: the estimand is the mean of
    the clamped values, biased by the move onto the grid points inside the
    bounds, at most ``g``. Noise variance of the mean ``g^2 Var(Z) / n``.
    """
    noise = mechanism.estimator_variance(require_records(count))
    return mean_estimate(count, mean, variance, noise, mechanism.granularity)


def estimate_histogram(
    mechanism: GaussianMechanism, released: ArrayLike, bins: int = 10
) -> HistogramEstimate:
    """``LatticeHistogram`` of a whole column of Gaussian releases at once."""
    return column_histogram(lattice_noise(mechanism), released, bins)


__all__ = [
    "Calibration",
    "GaussianMechanism",
    "analytic_gaussian_delta",
    "analytic_gaussian_sigma",
    "check_calibration",
    "classical_gaussian_sigma",
    "discrete_gaussian_cdf",
    "estimate_histogram",
    "estimate_mean",
    "lattice_noise",
    "require_positive_delta",
]

"""Gaussian-process mechanism for functional fields sampled on a fixed grid.

Claim: ``(epsilon, delta)``-DP for any two raw functions ``v`` given by their
values at ``x_1..x_k``.

Release ``y = L w_hat``: Gram matrix ``M_ij = exp(-((x_i - x_j) / h)^2 / 2)``,
jittered ``A = M + lambda I = L L^T``, whitened ``w = L^(-1) v`` (computed
scaled, overflow-safe), and ``w_hat = g (round(clip_R(w)/g) + Z)`` from
``vector_gaussian.BallGaussian``: the guarantee is proved for ``w_hat``, and
``L w_hat`` is post-processing of it alone (Jazbec 2018, Thm. 6.2, Cor. 6.9;
Hall, Rinaldo, Wasserman 2013).

Calibration (``Delta = 2R``, on the grid ``Delta_Z = 2R/g + sqrt(k)`` with slack):
``thesis`` (default) ``sigma_Z = sqrt(2 ln(2/delta)) Delta_Z / eps``, refused
for ``eps > 1``, or ``analytic``, the least ``sigma_Z`` the discrete vector
bound certifies; both certified by ``DiscreteGaussianSampler.vector_delta``.

Sampler contract: two 64-bit words per grid point from the release's one
``words`` call (``BallGaussian.noisy_indices``).

Error ``E||y - v||_2 <= g sqrt(Var Z) E||N(0, A)||_2 + g ||L||_2 sqrt(k)/2``;
lower bound ``(1 - delta) 2 R sqrt(mu_max) / (2 (1 + e^eps))`` (Thm. 5.3);
variance of the mean ``g^2 Var(Z) (1 + lambda) / n`` per grid point.

Proof, step by step, with the function each step proves: docs/proofs/functional.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, Final, Literal

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.base import Mechanism, compact_gamma
from privstream.mechanisms.estimation import MeanEstimate, mean_estimate, require_records
from privstream.mechanisms.gaussian import analytic_gaussian_sigma, require_positive_delta
from privstream.mechanisms.grid import from_grid
from privstream.mechanisms.rng import NoiseSource
from privstream.mechanisms.validation import check_delta, check_epsilon, check_magnitude
from privstream.mechanisms.vector_gaussian import BallGaussian, check_rows, l2_norms, unit_rows

FunctionalCalibration = Literal["thesis", "analytic"]

#: jitter candidates lambda = 1e-10 * 10^j, j = 0..10
JITTER_STEPS: Final = tuple(10.0 ** (j - 10) for j in range(11))


def gaussian_gram(points: NDArray[np.float64], bandwidth: float) -> NDArray[np.float64]:
    """``M_ij = exp(-((x_i - x_j) / h)^2 / 2)``; an overflowing ratio gives its limit 0."""
    with np.errstate(over="ignore"):  # inf differences or ratios: exp(-inf) = 0 exactly
        ratio = (points[:, None] - points[None, :]) / bandwidth
        gram: NDArray[np.float64] = np.exp(-0.5 * (ratio * ratio))
    return gram


def jittered_cholesky(gram: NDArray[np.float64]) -> tuple[NDArray[np.float64], float]:
    """``(L, lambda)``: ``L L^T = M + lambda I`` for the first jitter that works."""
    eye = np.eye(len(gram))
    for jitter in JITTER_STEPS:
        try:
            factor: NDArray[np.float64] = np.linalg.cholesky(gram + jitter * eye).astype(np.float64)
        except np.linalg.LinAlgError:
            continue
        if np.all(np.isfinite(factor)) and np.all(np.diag(factor) > 0.0):
            return factor, jitter
    raise MechanismError(  # pragma: no cover -- M + I is positive definite
        "the Gram matrix is not positive definite even with jitter 1; check the grid"
    )


def gaussian_norm_mean(eigenvalues: NDArray[np.float64]) -> float:
    """``E||X||_2`` for ``X ~ N(0, A)``, ``A`` with the given eigenvalues (see the proof page)."""
    mu = np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None)
    total = float(np.sum(mu))
    if total <= 0.0:
        return 0.0
    centre = -math.log(total)
    u = np.linspace(centre - 90.0, centre + 90.0, 3601)
    step = float(u[1] - u[0])
    values = np.empty_like(u)
    for start in range(0, len(u), 256):  # chunks bound the (points x k) temporary
        t = np.exp(u[start : start + 256])
        log_laplace = -0.5 * np.sum(np.log1p(2.0 * t[:, None] * mu[None, :]), axis=1)
        values[start : start + 256] = -np.expm1(log_laplace) * np.exp(-0.5 * u[start : start + 256])
    integral = step * (float(np.sum(values)) - 0.5 * float(values[0] + values[-1]))
    return integral / (2.0 * math.sqrt(math.pi))


class FunctionalMechanism(Mechanism):
    """RKHS clipping and (discrete, whitened) Gaussian-process noise on a fixed grid."""

    name: ClassVar[str] = "functional"
    metric: ClassVar[str] = "Euclidean distance over the grid points ||y - v||_2"

    def __init__(
        self,
        *,
        grid_points: Sequence[float],
        bandwidth: float,
        rkhs_radius: float,
        epsilon: float,
        delta: float,
        calibration: FunctionalCalibration = "thesis",
    ) -> None:
        super().__init__(epsilon=check_epsilon(epsilon), delta=check_delta(delta))
        require_positive_delta(self.delta, "functional (Gaussian process) mechanism")
        if calibration not in ("thesis", "analytic"):
            raise MechanismError(f"calibration {calibration!r} is unknown; use thesis or analytic")
        points = np.asarray(grid_points, dtype=np.float64)
        if points.ndim != 1 or len(points) < 1 or not np.all(np.isfinite(points)):
            raise MechanismError("grid_points must be a non-empty list of finite numbers")
        h, radius = float(bandwidth), check_magnitude(rkhs_radius, "rkhs_radius")
        if not math.isfinite(h) or h <= 0.0:
            raise MechanismError(f"bandwidth {bandwidth!r} must be a finite number > 0")
        self.grid_points = points
        self.bandwidth = h
        self.rkhs_radius = radius
        self.calibration: FunctionalCalibration = calibration
        self.dimension = k = len(points)
        self.gram = gaussian_gram(points, h)
        self.cholesky, self.jitter = jittered_cholesky(self.gram)
        self._whitener = np.linalg.solve(self.cholesky, np.eye(k))  # L^-1
        self._eigenvalues: NDArray[np.float64] = np.linalg.eigvalsh(
            self.gram + self.jitter * np.eye(k)
        ).astype(np.float64)
        sens = 2.0 * radius
        factor: float | None
        if calibration == "thesis":
            if self.epsilon > 1.0:
                raise MechanismError(
                    f"the thesis calibration sqrt(2 ln(2/delta)) Delta/eps (Theorem 6.2) holds "
                    f"only for epsilon <= 1 (got {self.epsilon:g}); use calibration 'analytic'"
                )
            factor = math.sqrt(2.0 * math.log(2.0 / self.delta))
            self.sigma_continuous = factor * sens / self.epsilon
        else:
            factor = None
            self.sigma_continuous = analytic_gaussian_sigma(self.epsilon, self.delta, sens)
        self.core = BallGaussian(
            dimension=k,
            radius=radius,
            epsilon=self.epsilon,
            delta=self.delta,
            sigma_continuous=self.sigma_continuous,
            factor=factor,
        )
        self._norm_mean = gaussian_norm_mean(self._eigenvalues)

    @property
    def granularity(self) -> float:
        return self.core.granularity

    @property
    def sigma(self) -> float:
        """The multiplier of ``L N(0, I)``: noise covariance ``sigma^2 (M + lambda I)``."""
        return self.core.sigma

    @property
    def noise_covariance(self) -> NDArray[np.float64]:
        """Exact covariance of the released noise: ``g^2 Var(Z) (M + lambda I)``."""
        spread = self.core.granularity**2 * self.core.sampler.variance
        cov: NDArray[np.float64] = spread * (self.cholesky @ self.cholesky.T)
        return cov

    @property
    def expected_error(self) -> float:
        g, k = self.core.granularity, self.dimension
        spread = math.sqrt(self.core.sampler.variance)
        operator_norm = math.sqrt(float(self._eigenvalues[-1]))
        return g * (spread * self._norm_mean + operator_norm * math.sqrt(k) / 2.0)

    @property
    def expected_error_rkhs(self) -> float:
        """``E||A^(-1/2)(y - v)||_2``: the chi mean in whitened coordinates, plus rounding."""
        return self.core.noise_norm_mean()

    @property
    def gamma_lower_bound(self) -> float:
        diameter = 2.0 * self.rkhs_radius * math.sqrt(float(self._eigenvalues[-1]))
        return compact_gamma(diameter, self.epsilon, self.delta)

    @property
    def gamma_lower_bound_rkhs(self) -> float:
        """Theorem 5.3 in the RKHS norm: ``diam = 2R``."""
        return compact_gamma(2.0 * self.rkhs_radius, self.epsilon, self.delta)

    def estimator_variance(self, n: int) -> float:
        """Per grid point: ``g^2 Var(Z) (1 + lambda) / n``."""
        spread = self.core.granularity**2 * self.core.sampler.variance
        return spread * (1.0 + self.jitter) / n

    def params(self) -> dict[str, float | int | str]:
        return {
            "sigma": self.sigma,
            "sigma_continuous": self.sigma_continuous,
            "granularity": self.granularity,
            "jitter": self.jitter,
            "sensitivity_grid": self.core.sensitivity_grid,
            "grid_overhead": self.core.grid_overhead,
            "delta_achieved": self.core.delta_achieved,
            "grid_size": self.dimension,
            "bandwidth": self.bandwidth,
            "rkhs_radius": self.rkhs_radius,
            "calibration": self.calibration,
        }

    def whiten_scaled(
        self, values: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(p, L^(-1) (v / p))`` per row: ``w = L^(-1) v`` is their product, never formed here."""
        peak, unit = unit_rows(check_rows(values, self.dimension, self.name))
        direction: NDArray[np.float64] = unit @ self._whitener.T
        return peak, direction

    def whiten(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """``w = L^(-1) v`` for each row: ``||w||_2`` is the RKHS-ball norm ``||A^(-1/2) v||_2``.

        Entries beyond the double range are inf (the release never forms ``w``).
        """
        peak, direction = self.whiten_scaled(values)
        with np.errstate(over="ignore"):
            whitened: NDArray[np.float64] = peak[:, None] * direction
        return whitened

    def rkhs_norm(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """``||A^(-1/2) v||_2`` of each row (inf beyond the double range)."""
        peak, direction = self.whiten_scaled(values)
        with np.errstate(over="ignore"):
            norms: NDArray[np.float64] = peak * l2_norms(direction)
        return norms

    def clip(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """Scale each function into the RKHS ball of radius ``R`` (back in grid values)."""
        clipped: NDArray[np.float64] = self._clip_whitened(values) @ self.cholesky.T
        return clipped

    def _clip_whitened(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        return self.core.clip_scaled(*self.whiten_scaled(values))

    def release(self, values: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        """Sanitize an ``(n, k)`` matrix of finite functions on the grid (else MechanismError)."""
        clipped = self._clip_whitened(values)
        words = source.words(len(clipped), self.core.words_per_row)
        noisy = from_grid(self.core.noisy_indices(clipped, words), self.core.granularity)
        released: NDArray[np.float64] = noisy @ self.cholesky.T  # post-processing of w_hat
        return released


def estimate_mean_curve(
    mechanism: FunctionalMechanism,
    count: int,
    mean: NDArray[np.float64],
    variance: NDArray[np.float64],
) -> MeanEstimate:
    """Pointwise mean of ``count`` released curves, from their per-point sample mean and variance.

    ``y = L g (round(w/g) + Z)`` with ``w = clip(L^-1 v)``: ``E[y] = clip(v) + g L r``,
    ``|r_j| <= 1/2``, so the mean curve estimates the mean of the curves *clipped*
    to the RKHS ball of radius ``R``, up to a rounding bias of at most
    ``g sqrt(k (1 + lambda)) / 2`` per point (each row of ``L`` has norm
    ``sqrt(1 + lambda)``). The noise is added at every grid point with variance
    ``g^2 Var(Z) (1 + lambda)`` (``estimator_variance``), correlated between
    points through ``M``: the bands are pointwise, not simultaneous. The
    population band uses each point's sample variance of the released curves,
    valid for the mean curve of a population the records are drawn from.
    """
    bias = mechanism.granularity * math.sqrt(mechanism.dimension * (1.0 + mechanism.jitter)) / 2.0
    noise = mechanism.estimator_variance(require_records(count))
    return mean_estimate(count, mean, variance, noise, bias)

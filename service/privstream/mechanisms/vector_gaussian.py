"""Gaussian mechanism for L2-bounded vectors, on the integer grid.

Claim: ``(epsilon, delta)``-DP for any two raw vectors of the field.

Release ``Y_d = g (round(clip(d)/g) + Z)``: ``clip`` the projection into the L2
ball of radius ``R`` (overflow-safe, computed scaled by ``max_j |x_j|``),
independent ``Z_j ~ N_Z(0, sigma_Z^2)``, one per coordinate. ``BallGaussian`` is
the core, shared with ``privstream.mechanisms.functional``.

Calibration: the continuous sigma at sensitivity ``2R`` (``gaussian``'s
``classical`` or ``analytic``) picks the grid, refined towards
``g <= R/(32 sqrt(k))``; on the grid ``Delta_Z = 2R(1 + (k+16) 2^-52)/g + sqrt(k)``
and ``sigma_Z`` is certified by the zCDP bound of
``DiscreteGaussianSampler.vector_delta`` (``analytic``: the least it certifies).

Sampler contract: ``noisy_indices`` reads two 64-bit words per coordinate from
the release's one ``words`` call.

Error: the chi mean at the sampler's exact sd plus ``g sqrt(k)/2``; lower bound
``(1 - delta) 2R / (2 (1 + e^eps))`` (Thm. 5.3); variance of the mean
``g^2 Var(Z) / n`` per coordinate.

Proof, step by step, with the function each step proves:
docs/proofs/vector-gaussian.md.
"""

from __future__ import annotations

import math
from typing import ClassVar, Final

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.base import Mechanism, compact_gamma
from privstream.mechanisms.discrete_gaussian import (
    MAX_TABLE_SIGMA,
    WORDS_PER_SAMPLE,
    calibrated_sampler,
    concentrated_delta,
    sampler_for,
    smallest_sigma,
    vector_bound,
)
from privstream.mechanisms.estimation import MeanEstimate, mean_estimate, require_records
from privstream.mechanisms.gaussian import (
    Calibration,
    analytic_gaussian_sigma,
    check_calibration,
    classical_gaussian_sigma,
    require_positive_delta,
)
from privstream.mechanisms.grid import GRID_STEPS_PER_SCALE, from_grid, granularity, to_grid
from privstream.mechanisms.rng import NoiseSource, Words
from privstream.mechanisms.validation import (
    check_delta,
    check_epsilon,
    check_finite,
    check_magnitude,
    check_noise_scale,
)

#: the vector grid may be up to this many times finer than ``sigma / 2^10``
VECTOR_MAX_REFINEMENT: Final = 8
#: target: rounding inflates the vector sensitivity by at most 1/64
_VECTOR_OVERHEAD_TARGET: Final = 1.0 / 64.0


def chi_mean(k: int) -> float:
    """``E||N(0, I_k)||_2 = sqrt(2) Gamma((k+1)/2) / Gamma(k/2)``."""
    return math.sqrt(2.0) * math.exp(math.lgamma((k + 1) / 2.0) - math.lgamma(k / 2.0))


def unit_rows(values: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``(p, x / p)`` per row, ``p = max_j |x_j|`` (rows of zeros: ``p = 0``, ``x / p = 0``)."""
    if not values.shape[1]:
        return np.zeros(len(values)), values
    peak = np.max(np.abs(values), axis=1)
    unit: NDArray[np.float64] = values / np.where(peak > 0.0, peak, 1.0)[:, None]
    return peak, unit


def l2_norms(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """``||x||_2`` of each finite row without overflowing squares (inf beyond the double range)."""
    peak, unit = unit_rows(values)
    with np.errstate(over="ignore"):  # a norm beyond 1.8e308 is reported as inf
        norms: NDArray[np.float64] = peak * np.sqrt(np.sum(unit * unit, axis=1))
    return norms


def vector_granularity(sigma: float, radius: float, dimension: int) -> float:
    """``granularity(sigma)``, refined (at most 8x) towards ``g <= R / (32 sqrt(k))``."""
    wanted = GRID_STEPS_PER_SCALE * 2.0 * radius * _VECTOR_OVERHEAD_TARGET / math.sqrt(dimension)
    scale = min(sigma, max(wanted, sigma / VECTOR_MAX_REFINEMENT))
    return granularity(scale, radius)


class BallGaussian:
    """Shared core: clip to the L2 ball of radius ``R``, round to the grid, add ``N_Z``^k.

    ``factor`` is ``None`` for the least sigma the vector bound certifies, or the
    constant ``c`` of a formula ``sigma_Z = c Delta_Z / eps`` (then certified).
    """

    def __init__(
        self,
        *,
        dimension: int,
        radius: float,
        epsilon: float,
        delta: float,
        sigma_continuous: float,
        factor: float | None,
    ) -> None:
        self.dimension = k = dimension
        self.radius = radius
        check_noise_scale(
            sigma_continuous,
            radius,
            finest=VECTOR_MAX_REFINEMENT,
            width="the radius (l2_bound, rkhs_radius)",
        )
        self.granularity = g = vector_granularity(sigma_continuous, radius, k)
        self.clip_slack = (k + 16) * 2.0**-52
        self.sensitivity_grid = 2.0 * radius * (1.0 + self.clip_slack) / g + math.sqrt(k)
        self.grid_overhead = math.sqrt(k) * g / (2.0 * radius)
        sens = self.sensitivity_grid
        if factor is None:
            first = smallest_sigma(
                lambda s: concentrated_delta(sens**2 / (2.0 * s * s), epsilon),
                delta,
                sigma_continuous / g,
                rtol=1e-9,
            )
            self._check_table(first)
            probe = sampler_for(first)
            # the table's corrections at `first`; they grow like sigma (q(0) absorbs the
            # rounding of ~sigma sqrt(2 pi) weights), so scale them, with 0.1 % to spare
            log_hi, log_lo, tail = probe.correction_constants()

            def widened(s: float) -> float:
                grow = min(max(1.0, s / first), 4.0) * 1.001  # the final check is exact
                return vector_bound(epsilon, sens, k, s, grow * log_hi, grow * log_lo, grow * tail)

            try:
                start = smallest_sigma(widened, delta, first, rtol=1e-9)
            except MechanismError:
                raise MechanismError(
                    f"the discrete Gaussian vector cannot be certified at epsilon {epsilon:g}, "
                    f"delta {delta:.3g} (epsilon too large for its 2^-128 table); "
                    "lower epsilon or raise delta"
                ) from None
        else:
            start = factor * sens / epsilon
        self._check_table(start)
        if factor is None:
            self.sampler = calibrated_sampler(
                epsilon, delta, lambda smp: smp.vector_delta(epsilon, sens, k), start
            )
        else:
            self.sampler = sampler_for(start)
            if self.sampler.vector_delta(epsilon, sens, k) > delta:
                raise MechanismError(
                    "the formula's sigma does not certify (epsilon, delta) for the discrete "
                    "Gaussian vector on the grid; use calibration 'analytic'"
                )
        self.delta_achieved = self.sampler.vector_delta(epsilon, sens, k)

    def _check_table(self, sigma_grid: float) -> None:
        if sigma_grid > MAX_TABLE_SIGMA:
            raise MechanismError(
                f"rounding a {self.dimension}-dimensional vector to the grid inflates its "
                f"sensitivity by {self.grid_overhead:.3g}x and the noise table would exceed "
                f"sigma {MAX_TABLE_SIGMA:.0f} grid steps; raise epsilon or the L2 bound, "
                "or lower the dimension"
            )

    @property
    def sigma(self) -> float:
        return self.granularity * self.sampler.sigma

    def shrink(
        self, peak: NDArray[np.float64], direction: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        """Rows ``x = p u`` (``p >= 0``): the factor ``f`` with ``u f = clip(x)``, and which clip.

        ``||x||_2 = p ||u||_2`` is never formed: ``x`` is outside iff ``p > R / ||u||_2``,
        then ``f = R / ||u||_2`` (onto the sphere), else ``f = p``. ``u`` is a row with
        max-abs 1 (``||u||_2 >= 1``) or ``L^(-1)`` of one (``||u||_2 >= 1 / sqrt(2 k)``),
        so ``R / ||u||_2 <= 2^7 R`` is finite.
        """
        norms = l2_norms(direction)
        limit = self.radius / np.where(norms > 0.0, norms, 1.0)
        over = peak > limit
        return np.where(over, limit, peak), over

    def clip(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """Scale each row into the ball: ``x min(1, R / ||x||_2)``, overflow-safe (proof page)."""
        peak, unit = unit_rows(values)
        factor, over = self.shrink(peak, unit)
        clipped: NDArray[np.float64] = np.where(over[:, None], unit * factor[:, None], values)
        return clipped

    def clip_scaled(
        self, peak: NDArray[np.float64], direction: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """``clip(p u)`` for rows given as ``(p, u)``, where ``p u`` itself may overflow."""
        factor, _ = self.shrink(peak, direction)
        clipped: NDArray[np.float64] = direction * factor[:, None]
        return clipped

    def noisy_indices(self, clipped: NDArray[np.float64], words: Words) -> NDArray[np.int64]:
        """Grid indices of clipped rows plus independent discrete Gaussian noise."""
        n, k = clipped.shape
        noise = self.sampler.sample(words.reshape(n, k, WORDS_PER_SAMPLE))
        return to_grid(clipped, self.granularity) + noise

    @property
    def words_per_row(self) -> int:
        return WORDS_PER_SAMPLE * self.dimension

    def noise_norm_mean(self) -> float:
        """Upper bound on ``E||g (Z + r)||_2``: chi mean at the exact sd, plus ``g sqrt(k)/2``."""
        k = self.dimension
        spread = math.sqrt(self.sampler.variance)
        return self.granularity * (spread * chi_mean(k) + math.sqrt(k) / 2.0)


def check_rows(values: NDArray[np.float64], dimension: int, name: str) -> NDArray[np.float64]:
    """A finite ``(n, dimension)`` float matrix, or MechanismError (never quoting values)."""
    matrix = np.asarray(values, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[1] != dimension:
        raise MechanismError(f"{name}: expected shape (n, {dimension}), got {matrix.shape}")
    return check_finite(matrix, name)


class VectorGaussianMechanism(Mechanism):
    """Clip to the L2 ball of radius ``l2_bound``, grid, add a discrete Gaussian vector."""

    name: ClassVar[str] = "vector_gaussian"
    metric: ClassVar[str] = "Euclidean distance ||y - d||_2"

    def __init__(
        self,
        *,
        dimension: int,
        l2_bound: float,
        epsilon: float,
        delta: float,
        calibration: Calibration = "analytic",
    ) -> None:
        super().__init__(epsilon=check_epsilon(epsilon), delta=check_delta(delta))
        require_positive_delta(self.delta, "vector Gaussian mechanism")
        check_calibration(calibration, ("analytic", "classical"))
        if isinstance(dimension, bool) or int(dimension) != dimension or dimension < 1:
            raise MechanismError(f"dimension {dimension!r} must be an integer >= 1")
        radius = check_magnitude(l2_bound, "l2_bound")
        self.dimension = int(dimension)
        self.l2_bound = radius
        self.calibration: Calibration = calibration
        sens = 2.0 * radius
        if calibration == "classical":
            self.sigma_continuous = classical_gaussian_sigma(self.epsilon, self.delta, sens)
            factor: float | None = math.sqrt(2.0 * math.log(1.25 / self.delta))
        else:
            self.sigma_continuous = analytic_gaussian_sigma(self.epsilon, self.delta, sens)
            factor = None
        self.core = BallGaussian(
            dimension=self.dimension,
            radius=radius,
            epsilon=self.epsilon,
            delta=self.delta,
            sigma_continuous=self.sigma_continuous,
            factor=factor,
        )

    @property
    def granularity(self) -> float:
        return self.core.granularity

    @property
    def sigma(self) -> float:
        """Per-coordinate noise scale in the value's units."""
        return self.core.sigma

    @property
    def expected_error(self) -> float:
        return self.core.noise_norm_mean()

    @property
    def gamma_lower_bound(self) -> float:
        return compact_gamma(2.0 * self.l2_bound, self.epsilon, self.delta)

    def estimator_variance(self, n: int) -> float:
        """Per coordinate: ``g^2 Var(Z) / n`` for the mean of ``n`` released vectors."""
        return self.core.granularity**2 * self.core.sampler.variance / n

    def params(self) -> dict[str, float | int | str]:
        return {
            "sigma": self.sigma,
            "sigma_continuous": self.sigma_continuous,
            "granularity": self.granularity,
            "sensitivity_grid": self.core.sensitivity_grid,
            "grid_overhead": self.core.grid_overhead,
            "delta_achieved": self.core.delta_achieved,
            "dimension": self.dimension,
            "l2_bound": self.l2_bound,
            "calibration": self.calibration,
        }

    def clip(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """Project rows into the L2 ball: ``x min(1, R / ||x||_2)``."""
        return self.core.clip(check_rows(values, self.dimension, self.name))

    def release(self, values: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        """Sanitize an ``(n, dimension)`` matrix of finite raw vectors (else MechanismError)."""
        clipped = self.clip(values)
        words = source.words(len(clipped), self.core.words_per_row)
        return from_grid(self.core.noisy_indices(clipped, words), self.granularity)

    def noise_error(
        self, inputs: NDArray[np.float64], outputs: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """``||y - g round(clip(d) / g)||_2 = g ||Z||_2`` per row."""
        noiseless = from_grid(to_grid(self.clip(inputs), self.granularity), self.granularity)
        return l2_norms(outputs - noiseless)


# --- analyst side: the release in the terms of ``estimation`` ----------------------------------


def estimate_vector_mean(
    mechanism: VectorGaussianMechanism,
    count: int,
    mean: NDArray[np.float64],
    variance: NDArray[np.float64],
) -> MeanEstimate:
    """Per-coordinate mean of ``count`` released vectors (sample mean and variance per coordinate).

    ``Y = g (round(clip(d)/g) + Z)``: each coordinate's mean estimates the mean of
    the vectors *clipped* to the L2 ball, up to rounding of ``g/2``; noise
    variance ``g^2 Var(Z) / n`` per coordinate, independent across coordinates.
    """
    noise = mechanism.estimator_variance(require_records(count))
    return mean_estimate(count, mean, variance, noise, mechanism.granularity / 2.0)


__all__ = [
    "BallGaussian",
    "VectorGaussianMechanism",
    "check_rows",
    "chi_mean",
    "estimate_vector_mean",
    "l2_norms",
    "unit_rows",
    "vector_granularity",
]

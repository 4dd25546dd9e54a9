"""A private kernel density estimate on a declared grid (Jazbec 2018, Example 6.10).

Claim: the released unnormalised kernel sums on the grid are ``(eps, delta)``-DP
for adding or removing one unit of ``L`` records.

Each record ``d`` (clamped into the bounds) adds the kernel function
``k_d(x) = exp(-(x - d)^2 / (2 h^2))``, whose RKHS norm is ``sqrt(K(d, d)) = 1``;
on the grid, its whitened vector ``w_d = L^(-1) k_d`` (``L L^T = M + lambda I``,
``M`` the Gram matrix) has ``||w_d||_2 <= 1``. Each ``w_d`` is clipped to the
unit ball (against float error) and quantised to ``2^-44``: integers, summed
exactly (partials merge exactly). A unit moves the whitened sum by at most
``L rho`` in L2 (``rho = 1 + 2^-30`` covers the quantisation). The noise is the
functional mechanism's core (``BallGaussian``, calibrated ``analytic`` at
sensitivity ``L rho``): ``w_hat = g (round(W / g) + Z)``, ``Z`` discrete Gaussian
per coordinate, and ``S_hat = L w_hat`` (post-processing) estimates the kernel
sums, a Gaussian-process path with the kernel's Gram matrix as covariance.
The density divides by the noisy count and ``sqrt(2 pi) h``, never the true ``n``.

Sampler contract: ``WORDS_PER_SAMPLE`` words per grid point from one ``words``
call per release. Proof: docs/proofs/aggregates.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.discrete_gaussian import WORDS_PER_SAMPLE
from privstream.mechanisms.functional import FunctionalMechanism
from privstream.mechanisms.rng import NoiseSource

#: each whitened coordinate is an integer number of these
QUANTUM_BITS = 44
#: the L2 norm of one record's quantised whitened vector, at most (module docstring)
RHO = 1.0 + 2.0**-30
#: a coordinate's 97.5% sub-Gaussian factor: P(|X| > t s) <= 2 exp(-t^2 / 2) = 0.025
_SUBGAUSSIAN_975 = math.sqrt(2.0 * math.log(2.0 / 0.025))


def round_shift(total: int, shift: int) -> int:
    """``round(total / 2^shift)``, ties to even, exactly in integers (any sign of ``shift``)."""
    if shift <= 0:
        return total << -shift
    quotient, remainder = divmod(total, 1 << shift)
    twice = 2 * remainder
    if twice > (1 << shift) or (twice == (1 << shift) and quotient % 2):
        quotient += 1
    return quotient


@dataclass(frozen=True)
class DensityPart:
    """The kernel sums' noise on the grid: ``(epsilon, delta)`` at sensitivity ``L rho``."""

    epsilon: float
    delta: float
    records: int
    grid: tuple[float, ...]
    bandwidth: float
    bounds: tuple[float, float]
    mechanism: FunctionalMechanism
    #: ``L^(-1)``, from the mechanism's Cholesky factor
    whitener: NDArray[np.float64] = field(compare=False, repr=False)

    @classmethod
    def build(
        cls,
        epsilon: float,
        delta: float,
        records: int,
        grid: tuple[float, ...],
        bandwidth: float,
        bounds: tuple[float, float],
    ) -> DensityPart:
        # the core is calibrated at sensitivity 2 R = L rho (``BallGaussian``)
        mechanism = FunctionalMechanism(
            grid_points=grid,
            bandwidth=bandwidth,
            rkhs_radius=records * RHO / 2.0,
            epsilon=epsilon,
            delta=delta,
            calibration="analytic",
        )
        k = len(grid)
        whitener = np.linalg.solve(mechanism.cholesky, np.eye(k)).astype(np.float64)
        return cls(epsilon, delta, records, grid, bandwidth, bounds, mechanism, whitener)

    @property
    def step(self) -> float:
        """The grid step ``g`` of the whitened noise (a power of two)."""
        return self.mechanism.core.granularity

    @property
    def sigma(self) -> float:
        """The noise's standard deviation per whitened coordinate, ``g sigma_Z``."""
        return self.mechanism.core.sigma

    def whitened(self, values: Sequence[float]) -> NDArray[np.int64]:
        """Each record's clipped, quantised whitened kernel vector (integers of ``2^-44``).

        Elementwise operations only, accumulated column by column in a fixed
        order (no matrix product, whose blocking may depend on the batch): a
        record's vector is the same bits in any batch, so a replay's partial is.
        """
        lo, hi = self.bounds
        d = np.clip(np.asarray(values, dtype=np.float64), lo, hi)
        whitener = self.whitener
        w = np.zeros((len(d), len(self.grid)), dtype=np.float64)
        for j, point in enumerate(self.grid):
            kernel = np.exp(-0.5 * ((point - d) / self.bandwidth) ** 2)  # k_d(x_j), in [0, 1]
            w += kernel[:, None] * whitener[:, j][None, :]  # column j of L^-1, times k_d(x_j)
        squares = np.zeros(len(d), dtype=np.float64)
        for j in range(len(self.grid)):
            squares += w[:, j] * w[:, j]
        norms = np.sqrt(squares)
        w /= np.where(norms > 1.0, norms, 1.0)[:, None]
        quanta: NDArray[np.int64] = np.rint(np.ldexp(w, QUANTUM_BITS)).astype(np.int64)
        return quanta

    def noisy_sums(self, totals: list[list[int]], source: NoiseSource) -> NDArray[np.float64]:
        """Each group's kernel sums on the grid, ``L w_hat``, from its whitened integer totals."""
        k = len(self.grid)
        n = len(totals)
        exponent = round(math.log2(self.step))
        indices = np.empty((n, k), dtype=np.int64)
        for row, group in enumerate(totals):
            for j, total in enumerate(group):
                index = round_shift(total, QUANTUM_BITS + exponent)
                if abs(index) >= 2**62:
                    raise MechanismError("a density's kernel sums overflow the noise grid")
                indices[row, j] = index
        words = source.words(n, WORDS_PER_SAMPLE * k).reshape(n, k, WORDS_PER_SAMPLE)
        noisy = (indices + self.mechanism.core.sampler.sample(words)).astype(np.float64)
        sums: NDArray[np.float64] = (noisy * self.step) @ self.mechanism.cholesky.T
        return sums

    def spread(self) -> NDArray[np.float64]:
        """Each grid point's noise standard deviation: ``g sd(Z) ||row j of L||_2``."""
        rows = np.sqrt(np.sum(self.mechanism.cholesky**2, axis=1))
        sd = self.step * math.sqrt(self.mechanism.core.sampler.variance)
        out: NDArray[np.float64] = sd * rows
        return out

    def half_widths(self) -> NDArray[np.float64]:
        """97.5% half-widths per grid point (sub-Gaussian tails of the discrete Gaussian)."""
        rows = np.sqrt(np.sum(self.mechanism.cholesky**2, axis=1))
        out: NDArray[np.float64] = _SUBGAUSSIAN_975 * self.sigma * rows
        return out

    @property
    def normaliser(self) -> float:
        """``sqrt(2 pi) h``: kernel sums over it and the count are a density."""
        return math.sqrt(2.0 * math.pi) * self.bandwidth

    def describe(self) -> dict[str, float | int | str]:
        return {
            "part": "kernel_sums",
            "epsilon": self.epsilon,
            "delta": self.mechanism.core.delta_achieved,
            "sensitivity": self.records * RHO,
            "sensitivity_independent": self.records * RHO,
            "sensitivity_naive": self.records * RHO,
            "scale": self.sigma,
            "expected_error": float(np.max(self.spread())) / self.normaliser,
            "std_error": float(np.max(self.spread())) / self.normaliser,
            "ci95_half_width": float(np.max(self.half_widths())) / self.normaliser,
            "cells": len(self.grid),
        }

r"""Estimator math shared by the numeric mechanisms, on the analyst side.

Means with intervals (``MeanEstimate``) and histogram deconvolution on the
integer lattice (``LatticeNoise``, ``LatticeHistogram``). Nothing here knows a
particular mechanism: ``laplace``, ``gaussian``, ``integer_laplace``,
``vector_gaussian`` and ``functional`` describe their releases in these terms
(noise variance of the mean, rounding bias; for scalars the lattice and the
noise CDF) in their own ``estimate_mean`` (``estimate_vector_mean``,
``estimate_mean_curve``), ``lattice_noise`` and ``estimate_histogram``.
``privstream estimate`` calls them with statistics it accumulates while
reading, so that a long stream never has to be held in memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from privstream.errors import MechanismError


class MeanEstimate(NamedTuple):
    """The mean of released values, one entry per coordinate (shape (1,) for scalars).

    The released value is ``Y = x + noise`` with ``x`` the mechanism's own input
    (the raw value clamped into the bounds, on the grid) and zero-mean noise
    drawn independently of the data, so the sample mean of the releases is an
    unbiased estimate of the mean of the ``x``: the mean of the *clamped*
    values, up to ``bias_bound`` (grid rounding), never the mean of values
    outside the bounds.
    """

    mean: NDArray[np.float64]
    #: noise only, given the records: ``sqrt(estimator_variance(n))``; for the mean
    #: of these records' own clamped values
    stderr: NDArray[np.float64]
    #: ``sqrt(s^2 / n)`` with ``s^2`` the sample variance of the releases (noise and the
    #: spread between records): for the mean of a population the records are iid draws from
    stderr_population: NDArray[np.float64]
    #: ``|E[mean] - mean of the clamped values|`` is at most this (grid rounding)
    bias_bound: float


def require_records(count: int) -> int:
    """``count``, or MechanismError when there is nothing to estimate from."""
    if count < 1:
        raise MechanismError(f"the estimator needs at least one record, got n = {count}")
    return count


def mean_estimate(
    count: int,
    mean: ArrayLike,
    variance: ArrayLike,
    noise_variance_of_mean: float,
    bias_bound: float,
) -> MeanEstimate:
    """Assemble a ``MeanEstimate`` from the releases' sample mean and variance (ddof 1)."""
    require_records(count)
    centre = np.atleast_1d(np.asarray(mean, dtype=np.float64))
    spread = np.atleast_1d(np.asarray(variance, dtype=np.float64))
    noise = np.full(centre.shape, math.sqrt(max(noise_variance_of_mean, 0.0)))
    population = (
        np.sqrt(np.maximum(spread, 0.0) / count) if count > 1 else np.full_like(noise, np.nan)
    )
    return MeanEstimate(centre, noise, population, bias_bound)


class LatticeNoise(NamedTuple):
    """A mechanism whose noiseless values and noise live on one integer lattice.

    Released value ``y = origin + step (I + Z)``: ``I`` in ``[first, last]`` is the
    index of the clamped input, ``Z`` integer noise with CDF ``cdf`` (vectorised,
    ``P(Z <= k)``), independent of the data. ``noiseless`` maps raw values to ``I``
    the way the mechanism does (for comparing with a known truth).
    """

    step: float
    origin: float
    first: int
    last: int
    cdf: Callable[[NDArray[np.int64]], NDArray[np.float64]]
    #: standard deviation of ``Z`` (lattice steps); 0 when the mechanism adds no noise
    spread: float
    noiseless: Callable[[NDArray[np.float64]], NDArray[np.int64]]
    #: True for integer fields (bins are shown as inclusive integer ranges)
    integer: bool = False

    def indices(self, released: ArrayLike) -> NDArray[np.int64]:
        """Lattice index ``I + Z`` of each released value."""
        values = np.asarray(released, dtype=np.float64)
        return np.rint((values - self.origin) / self.step).astype(np.int64)


def no_noise_cdf(k: NDArray[np.int64]) -> NDArray[np.float64]:
    """``P(Z <= k)`` for ``Z = 0``."""
    out: NDArray[np.float64] = (np.asarray(k) >= 0).astype(np.float64)
    return out


def constant_lattice(value: float) -> LatticeNoise:
    """A mechanism that releases ``value`` for every input (``lo == hi``): one point, no noise."""

    def constant(values: NDArray[np.float64]) -> NDArray[np.int64]:
        return np.zeros(np.shape(values), dtype=np.int64)

    return LatticeNoise(1.0, value, 0, 0, no_noise_cdf, 0.0, constant)


class HistogramEstimate(NamedTuple):
    """Estimated share of records per bin of the clamped values, with what it is compared to."""

    #: first and last lattice index of each bin (inclusive)
    starts: NDArray[np.int64]
    ends: NDArray[np.int64]
    #: value range of each bin: ``[lower, upper)`` (integers: ``lower..upper`` inclusive)
    lower: NDArray[np.float64]
    upper: NDArray[np.float64]
    #: deconvolved shares (non-negative, sum 1); the first and last include the bound atoms
    estimate: NDArray[np.float64]
    #: bootstrap standard error of each share (records resampled)
    stderr: NDArray[np.float64]
    #: the naive histogram: share of released values in each bin, values beyond the
    #: bounds counted in the first or last bin
    noisy_share: NDArray[np.float64]
    #: of ``estimate``, the share fitted as point masses exactly at the lower and upper
    #: bound (where clamped values land); weakly identified when the noise is wide
    at_bounds: NDArray[np.float64]
    at_bounds_stderr: NDArray[np.float64]
    records: int
    resamples: int


#: observation bins (besides the two tails) at most
MAX_OBSERVATION_BINS: Final = 4000
#: observation bins per true bin, when the budget allows
OBSERVATION_BINS_PER_BIN: Final = 4
#: the observation window reaches this many noise standard deviations beyond the bounds
OBSERVATION_REACH_SIGMAS: Final = 8.0
#: lattice points per bin used to average the noise CDF (all of them when fewer)
POINTS_PER_BIN: Final = 128


class LatticeHistogram:
    r"""Histogram of the clamped values, deconvolved from the noisy releases.

    Why deconvolve. The released values' histogram is the true one convolved
    with the noise pmf: at small epsilon it is mostly the noise's shape
    (``noisy_share``). No per-bin linear inversion like randomized response's
    is usable: for discrete Laplace noise an exact unbiased inverse exists,
    ``P(I = k) = ((1 + a^2) P(J = k) - a P(J = k-1) - a P(J = k+1)) / (1 - a)^2``,
    but on a fine grid (``t`` ~ 1000 steps) its variance grows like ``t^3`` (a
    bin's mass is a derivative of the noisy CDF at its edges), and a bin's
    transition probabilities depend on where inside the bin its values lie.

    What is done instead, a parametric least-squares deconvolution:

    * ``bins`` equal bins of lattice points over ``[first, last]`` (one bin per
      point when there are fewer points).
    * Model of the clamped values' distribution: a continuous piecewise-linear
      density with knots at the bin edges (``bins + 1`` non-negative "hat"
      components, the edge ones halved), plus two point masses exactly on the
      bounds, where clamping puts every value beyond them. When every bin is
      a single lattice point (integer fields with ``bins`` >= the number of
      values) the model is instead one point mass per value: exact, no
      assumption at all. Either way ``P(J in O_j) = sum_c A_jc pi_c``, with
      ``A_jc`` the component-weighted average of ``P(i + Z in O_j)`` over its
      lattice points ``i`` (from the noise CDF; at most 2 x ``POINTS_PER_BIN``
      evenly spaced points per component), and a bin's share is the part of
      each component that lies in it.
    * Observation bins ``O_j``: the window ``[first - W, last + W]``,
      ``W = 8 sd(Z)``, cut into up to 4000 bins (about 4 per true bin), plus the
      two tails.
    * ``pi`` = weighted non-negative least squares (``scipy.optimize.nnls``) of the
      observed shares on ``A``, with ``sum pi = 1`` as a heavily weighted extra
      row, then renormalised. Weights ``1/sqrt(P_j)`` (the binomial variance of a
      share), first with the observed, then with the fitted ``P_j`` (a Pearson
      chi-square fit, close to maximum likelihood).
    * Standard errors: nonparametric bootstrap (records resampled: the
      observation counts redrawn from their multinomial), ``resamples`` refits
      with a fixed seed, so the output is a deterministic function of the
      releases.

    What it is worth. Consistent when the model holds (the error then shrinks
    like ``1/sqrt(n)`` and the bootstrap errors describe it). A smooth density
    is close to piecewise linear on narrow bins (the error of linear
    interpolation is ``O(w^2 f'')``); a density with jumps inside the range
    is smeared over the neighbouring bins. That model error does not shrink
    with ``n`` and is *not* in the standard errors
    (``tests/unit/estimate/test_numeric.py`` measures it). At small epsilon
    with many bins the problem is ill-conditioned: the bootstrap errors are
    then large, and they are shown. The unbiased numbers are the mean
    (``estimate_mean``) and, for categories, the frequencies.
    """

    def __init__(self, noise: LatticeNoise, bins: int) -> None:
        if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
            raise MechanismError(f"bins {bins!r} must be an integer >= 1")
        self.noise = noise
        points = noise.last - noise.first + 1
        count = min(bins, points)
        offsets = (np.arange(count + 1, dtype=np.int64) * points) // count
        self.starts: NDArray[np.int64] = noise.first + offsets[:-1]
        self.ends: NDArray[np.int64] = noise.first + offsets[1:] - 1
        widths = self.ends - self.starts + 1
        reach = math.ceil(OBSERVATION_REACH_SIGMAS * noise.spread)
        span = points + 2 * reach
        width = max(1, math.ceil(int(widths.min()) / OBSERVATION_BINS_PER_BIN))
        width = max(width, math.ceil(span / MAX_OBSERVATION_BINS))
        #: interior observation bin j covers [origin + j width, origin + (j+1) width - 1]
        self.obs_origin = noise.first - reach
        self.obs_width = width
        self.obs_bins = math.ceil(span / width)
        #: True: one point mass per lattice value (exact); False: hats and bound atoms
        self.exact = bool(np.all(widths == 1))
        self.design, self.fold = self._design()

    @property
    def bins(self) -> int:
        return len(self.starts)

    @property
    def observation_bins(self) -> int:
        """Length of the count vector ``observe`` returns (interior bins and two tails)."""
        return self.obs_bins + 2

    def observe(self, released: ArrayLike) -> NDArray[np.int64]:
        """Counts of released values per observation bin (add them up over chunks)."""
        ids = (self.noise.indices(released) - self.obs_origin) // self.obs_width + 1
        ids = np.clip(ids, 0, self.obs_bins + 1)
        counts: NDArray[np.int64] = np.bincount(ids, minlength=self.observation_bins).astype(
            np.int64
        )
        return counts

    def bin_of(self, indices: ArrayLike) -> NDArray[np.int64]:
        """The bin of each noiseless lattice index (for a known truth)."""
        idx = np.clip(np.asarray(indices, dtype=np.int64), self.noise.first, self.noise.last)
        found: NDArray[np.int64] = np.searchsorted(self.starts, idx, side="right") - 1
        return found

    def _component(
        self, boundaries: NDArray[np.int64], points: NDArray[np.int64], weights: NDArray[Any]
    ) -> tuple[NDArray[Any], NDArray[Any]]:
        """(column of A, share in each bin) of a component with these points and weights."""
        weights = weights / weights.sum()
        below = self.noise.cdf(boundaries[:, None] - points[None, :])
        padded = np.vstack([np.zeros((1, len(points))), below, np.ones((1, len(points)))])
        column = np.diff(padded, axis=0) @ weights
        in_bins = np.bincount(self.bin_of(points), weights=weights, minlength=self.bins)
        return column, in_bins

    def _design(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        # P(J <= boundary) at the boundaries between observation bins
        boundaries = (
            self.obs_origin - 1 + self.obs_width * np.arange(self.obs_bins + 1, dtype=np.int64)
        )
        parts: list[tuple[NDArray[Any], NDArray[Any]]] = []
        first, last = self.noise.first, self.noise.last
        if self.exact:
            parts.extend(
                self._component(boundaries, np.array([point]), np.ones(1))
                for point in self.starts.tolist()
            )
        else:
            knots = np.append(self.starts - 0.5, self.ends[-1] + 0.5)
            for k, knot in enumerate(knots.tolist()):
                left = knots[max(k - 1, 0)]
                right = knots[min(k + 1, len(knots) - 1)]
                lo, hi = max(math.ceil(left), first), min(math.floor(right), last)
                used = min(hi - lo + 1, 2 * POINTS_PER_BIN)
                points = np.unique(
                    lo + ((2 * np.arange(used) + 1) * (hi - lo + 1)) // (2 * used)
                ).astype(np.int64)
                side = np.where(points < knot, knot - left, right - knot)
                weights = np.clip(1.0 - np.abs(points - knot) / np.maximum(side, 1e-12), 0, None)
                if weights.sum() <= 0:  # pragma: no cover -- every hat holds a lattice point
                    weights = np.ones(len(points))
                parts.append(self._component(boundaries, points, weights))
            parts.extend(
                self._component(boundaries, np.array([bound]), np.ones(1))
                for bound in (first, last)
            )
        design = np.clip(np.column_stack([column for column, _ in parts]), 0.0, 1.0)
        fold = np.column_stack([in_bins for _, in_bins in parts])
        return design.astype(np.float64), fold.astype(np.float64)

    def _fit(
        self, shares: NDArray[np.float64], weights: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        # lazy: scipy stays off the worker's import path
        from scipy.optimize import nnls  # type: ignore[import-untyped, unused-ignore]

        design = self.design * weights[:, None]
        target = shares * weights
        strength = 1e3 * float(weights.max())
        design = np.vstack([design, np.full((1, design.shape[1]), strength)])
        target = np.append(target, strength)
        solution, _ = nnls(design, target)
        pi = np.asarray(solution, dtype=np.float64)
        total = float(pi.sum())
        fitted: NDArray[np.float64] = pi / total if total > 0 else np.full_like(pi, 1 / len(pi))
        return fitted

    def _weights(self, probabilities: NDArray[np.float64], n: int) -> NDArray[np.float64]:
        out: NDArray[np.float64] = 1.0 / np.sqrt(np.maximum(probabilities, 1.0 / n))
        return out

    def estimate(
        self, counts: ArrayLike, *, resamples: int = 200, seed: int = 0
    ) -> HistogramEstimate:
        """Deconvolve observation counts (``observe``, summed over chunks) into bin shares."""
        observed = np.asarray(counts, dtype=np.int64)
        if observed.shape != (self.observation_bins,):
            raise MechanismError(
                f"expected {self.observation_bins} observation counts, got shape {observed.shape}"
            )
        n = int(observed.sum())
        if n < 1:
            raise MechanismError("no released values to estimate a histogram from")
        shares = observed / n
        first_fit = self._fit(shares, self._weights(shares, n))
        weights = self._weights(self.design @ first_fit, n)
        components = self._fit(shares, weights)
        rng = np.random.Generator(np.random.PCG64(seed))
        replicates = np.array(
            [self._fit(rng.multinomial(n, shares) / n, weights) for _ in range(resamples)]
        ).reshape(resamples, len(components))
        atoms = 0 if self.exact else 2
        nan = np.full(self.bins + atoms, np.nan)
        spread = replicates.std(axis=0, ddof=1) if resamples > 1 else nan
        stderr = (replicates @ self.fold.T).std(axis=0, ddof=1) if resamples > 1 else nan
        noisy = np.bincount(
            self.bin_of(self._centres()), weights=observed[1:-1], minlength=self.bins
        )
        noisy[0] += observed[0]
        noisy[-1] += observed[-1]
        lower, upper = self._value_edges()
        return HistogramEstimate(
            starts=self.starts,
            ends=self.ends,
            lower=lower,
            upper=upper,
            estimate=self.fold @ components,
            stderr=np.asarray(stderr[: self.bins], dtype=np.float64),
            noisy_share=noisy / n,
            at_bounds=components[len(components) - atoms :] if atoms else np.zeros(2),
            at_bounds_stderr=np.asarray(spread[len(spread) - 2 :] if atoms else np.zeros(2)),
            records=n,
            resamples=resamples,
        )

    def _centres(self) -> NDArray[np.int64]:
        """A representative lattice index of each interior observation bin."""
        steps = np.arange(self.obs_bins, dtype=np.int64)
        centres: NDArray[np.int64] = (
            self.obs_origin + self.obs_width * steps + (self.obs_width - 1) // 2
        )
        return centres

    def _value_edges(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        noise = self.noise
        starts = noise.origin + noise.step * self.starts.astype(np.float64)
        ends = noise.origin + noise.step * self.ends.astype(np.float64)
        if noise.integer:
            return starts, ends
        return starts - 0.5 * noise.step, ends + 0.5 * noise.step


def column_histogram(noise: LatticeNoise, released: ArrayLike, bins: int) -> HistogramEstimate:
    """``LatticeHistogram`` of a whole column of releases at once."""
    histogram = LatticeHistogram(noise, bins)
    return histogram.estimate(histogram.observe(released))

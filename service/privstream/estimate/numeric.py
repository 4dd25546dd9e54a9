"""Numeric accumulators: reals and integers, vectors and functions, with their truths.

A real or integer field keeps the moments of its releases (for the mean) and
their counts per observation bin (for the deconvolved histogram,
``privstream.mechanisms.estimation.LatticeHistogram``); a vector or functional
field keeps per-point moments (for the mean curve).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from privstream.estimate.accumulators import BaseAccumulator, Options, Truth, interval
from privstream.estimate.resolution import check_bins
from privstream.mechanisms.estimation import (
    HistogramEstimate,
    LatticeHistogram,
    LatticeNoise,
    MeanEstimate,
)
from privstream.mechanisms.functional import FunctionalMechanism
from privstream.mechanisms.gaussian import GaussianMechanism
from privstream.mechanisms.integer_laplace import IntegerLaplaceMechanism
from privstream.mechanisms.laplace import LaplaceMechanism
from privstream.mechanisms.vector_gaussian import VectorGaussianMechanism


def _number(value: object) -> float | None:
    """A finite JSON number as a float, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


_NUMBER_TYPES = (int, float)


def _fast_column(values: Sequence[Any], integer: bool) -> NDArray[np.float64] | None:
    """All values plain finite JSON numbers (whole for ``integer``): one array, else None."""
    if not all(type(v) in _NUMBER_TYPES for v in values):  # bool is not int here
        return None
    try:
        column = np.array(values, dtype=np.float64)
    except OverflowError:
        return None
    if not np.all(np.isfinite(column)) or (integer and np.any(column != np.floor(column))):
        return None
    return column


def real_column(values: Sequence[Any], skip: Callable[[object], None]) -> NDArray[np.float64]:
    """The finite JSON numbers of ``values`` as one array; ``skip`` is called with each other."""
    column = _fast_column(values, integer=False)
    if column is not None:
        return column
    good: list[float] = []
    for value in values:
        number = _number(value)
        if number is None:
            skip(value)
        else:
            good.append(number)
    return np.array(good, dtype=np.float64)


def _fast_matrix(values: Sequence[Any], width: int) -> NDArray[np.float64] | None:
    """All values arrays of ``width`` plain finite numbers: one matrix, else None."""
    if not all(type(v) is list and len(v) == width for v in values):
        return None
    if not all(type(x) in _NUMBER_TYPES for v in values for x in v):
        return None
    try:
        matrix = np.array(values, dtype=np.float64).reshape(len(values), width)
    except OverflowError:
        return None
    return matrix if bool(np.all(np.isfinite(matrix))) else None


def _clean(value: float) -> float | None:
    """JSON has no NaN: None instead."""
    return value if math.isfinite(value) else None


class Moments:
    """Count, mean and sum of squared deviations, merged chunk by chunk (Chan et al.)."""

    def __init__(self, width: int) -> None:
        self.count = 0
        self.mean = np.zeros(width)
        self.m2 = np.zeros(width)

    def add(self, chunk: NDArray[np.float64]) -> None:
        rows = chunk.reshape(len(chunk), -1)
        m = len(rows)
        if m == 0:
            return
        chunk_mean = rows.mean(axis=0)
        chunk_m2 = ((rows - chunk_mean) ** 2).sum(axis=0)
        total = self.count + m
        delta = chunk_mean - self.mean
        self.mean = self.mean + delta * (m / total)
        self.m2 = self.m2 + chunk_m2 + delta**2 * (self.count * m / total)
        self.count = total

    @property
    def variance(self) -> NDArray[np.float64]:
        """Sample variance (ddof 1); NaN below two values."""
        if self.count < 2:
            return np.full_like(self.mean, np.nan)
        out: NDArray[np.float64] = self.m2 / (self.count - 1)
        return out


# --- real and integer: mean and histogram ---------------------------------------------------


NumericMechanism = LaplaceMechanism | GaussianMechanism | IntegerLaplaceMechanism
MeanFunction = Callable[[int, float, float], MeanEstimate]


@dataclass(frozen=True)
class NumericApi:
    """A scalar mechanism's lattice description and mean estimator (named by its registration)."""

    lattice: LatticeNoise
    mean: MeanFunction


class ScalarTruth:
    def __init__(self, lower: float, upper: float, histogram: LatticeHistogram) -> None:
        self.lower, self.upper = lower, upper
        self.histogram = histogram
        self.count = 0
        self.raw_sum = 0.0
        self.clamped_sum = 0.0
        self.outside = 0
        self.bins = np.zeros(histogram.bins, dtype=np.int64)

    def add(self, parsed: Sequence[Any], raw: Sequence[Any]) -> None:
        values = np.array([float(v) for v in raw], dtype=np.float64)
        if not len(values):
            return
        clamped = np.clip(values, self.lower, self.upper)
        self.count += len(values)
        self.raw_sum += float(values.sum())
        self.clamped_sum += float(clamped.sum())
        self.outside += int(np.count_nonzero(clamped != values))
        indices = self.histogram.noise.noiseless(values)
        self.bins += np.bincount(self.histogram.bin_of(indices), minlength=len(self.bins))


class ScalarReleases(BaseAccumulator):
    """Released numbers of a real or integer field: moments and an observation histogram."""

    def __init__(
        self,
        name: str,
        kind: str,
        mechanism: NumericMechanism,
        *,
        api: NumericApi,
        integer: bool,
        options: Options,
    ) -> None:
        super().__init__(name, kind, mechanism)
        self.numeric = mechanism
        #: the releases are integers (the kind's registration says so)
        self.integer = integer
        self.mean_function = api.mean
        self.histogram = LatticeHistogram(api.lattice, options.bins)
        self.resamples = options.resamples
        self.moments = Moments(1)
        self.observed = np.zeros(self.histogram.observation_bins, dtype=np.int64)
        #: values off the mechanism's output lattice: impossible in its releases
        self.off_grid = 0
        self.notes.append(
            f"the mean estimates the mean of the values clamped into [{mechanism.lower:g}, "
            f"{mechanism.upper:g}]: values outside the bounds pull it inwards; the worker's "
            "privstream_field_clamped_noisy counts them (metrics.clamped_counts, with noise)"
        )

    def add(self, values: Sequence[Any]) -> None:
        column = _fast_column(values, self.integer)
        if column is not None:
            self._take(column)
            return
        good: list[float] = []
        for value in values:
            number = _number(value)
            if number is None or (self.integer and not number.is_integer()):
                self._skip(value)
            else:
                good.append(number)
        if good:
            self._take(np.array(good, dtype=np.float64))

    def _take(self, column: NDArray[np.float64]) -> None:
        lattice = self.histogram.noise
        nearest = lattice.origin + lattice.step * lattice.indices(column)
        self.off_grid += int(np.count_nonzero(np.abs(column - nearest) > 1e-6 * lattice.step))
        self.records += len(column)
        self.moments.add(column)
        self.observed += self.histogram.observe(column)

    def new_truth(self) -> ScalarTruth:
        return ScalarTruth(float(self.numeric.lower), float(self.numeric.upper), self.histogram)

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        entry["bounds"] = [self.numeric.lower, self.numeric.upper]
        entry["off_grid"] = self.off_grid
        if self.records == 0:
            return entry
        z = options.z
        est = self.mean_function(
            self.records, float(self.moments.mean[0]), float(self.moments.variance[0])
        )
        mean, stderr, population = (
            float(est.mean[0]),
            float(est.stderr[0]),
            float(est.stderr_population[0]),
        )
        block: dict[str, Any] = {
            "estimate": mean,
            "stderr": stderr,
            "ci": interval(mean, stderr, z),
            "stderr_population": _clean(population),
            "ci_population": interval(mean, population, z),
            "bias_bound": est.bias_bound,
        }
        if isinstance(truth, ScalarTruth) and truth.count:
            block["true"] = truth.clamped_sum / truth.count
            block["true_unclamped"] = truth.raw_sum / truth.count
            block["true_outside_bounds"] = truth.outside
            if truth.outside:
                entry["notes"].append(
                    f"{truth.outside} of {truth.count} true values lie outside the bounds: "
                    "compare the estimate with the clamped mean ('true')"
                )
        entry["mean"] = block
        hist = self.histogram.estimate(self.observed, resamples=options.resamples)
        entry["histogram"] = self._histogram_entry(hist, truth)
        if options.resamples > 1:  # the check needs the bootstrap standard errors
            checked = check_bins(self.histogram, hist)
            for row, bias, problem in zip(
                entry["histogram"]["bins"], checked.bias.tolist(), checked.problems, strict=True
            ):
                # the interval carries the model's bias (``resolution``): stderr alone missed
                width = math.hypot(row["stderr"], bias) if row["stderr"] is not None else math.nan
                row.update(
                    bias=_clean(bias),
                    unreliable=problem or None,
                    ci=interval(row["estimate"], width, options.z),
                )
        return entry

    def _histogram_entry(self, hist: HistogramEstimate, truth: Truth | None) -> dict[str, Any]:
        true_share = None
        if isinstance(truth, ScalarTruth) and truth.count:
            true_share = truth.bins / truth.count
        rows = []
        # the lattice bins reach half a grid step beyond the bounds: show the bounds
        lower = np.clip(hist.lower, self.numeric.lower, self.numeric.upper)
        upper = np.clip(hist.upper, self.numeric.lower, self.numeric.upper)
        for b in range(len(hist.estimate)):
            row: dict[str, Any] = {
                "lower": float(lower[b]),
                "upper": float(upper[b]),
                "estimate": float(hist.estimate[b]),
                "stderr": _clean(float(hist.stderr[b])),
                "noisy_share": float(hist.noisy_share[b]),
            }
            if true_share is not None:
                row["true"] = float(true_share[b])
            rows.append(row)
        model = (
            "one point mass per value (exact model)"
            if self.histogram.exact
            else "piecewise-linear density on the bins plus point masses at the bounds"
        )
        return {
            "method": (
                f"deconvolution by non-negative least squares; model: {model}; "
                f"bootstrap standard errors ({hist.resamples} resamples)"
            ),
            "integer_bins": self.integer,
            "bins": rows,
            "at_bounds": [float(v) for v in hist.at_bounds],
            "at_bounds_stderr": [_clean(float(v)) for v in hist.at_bounds_stderr],
        }


# --- vectors and functional fields: the mean curve ------------------------------------------


class CurveTruth:
    def __init__(self, mechanism: VectorGaussianMechanism | FunctionalMechanism) -> None:
        self.mechanism = mechanism
        width = mechanism.dimension
        self.count = 0
        self.raw_sum = np.zeros(width)
        self.clipped_sum = np.zeros(width)
        self.clipped_rows = 0

    def add(self, parsed: Sequence[Any], raw: Sequence[Any]) -> None:
        if not len(parsed):
            return
        rows = np.asarray(parsed, dtype=np.float64).reshape(len(parsed), -1)
        clipped = self.mechanism.clip(rows)
        self.count += len(rows)
        self.raw_sum += rows.sum(axis=0)
        self.clipped_sum += clipped.sum(axis=0)
        moved = np.any(np.abs(clipped - rows) > 1e-9 * (1.0 + np.abs(rows)), axis=1)
        self.clipped_rows += int(np.count_nonzero(moved))


CurveMeanFunction = Callable[[int, NDArray[np.float64], NDArray[np.float64]], MeanEstimate]


class CurveReleases(BaseAccumulator):
    """Released vectors or sampled functions: per-point moments."""

    def __init__(
        self,
        name: str,
        kind: str,
        mechanism: VectorGaussianMechanism | FunctionalMechanism,
        *,
        points: Sequence[float],
        mean: CurveMeanFunction,
        note: str,
    ) -> None:
        super().__init__(name, kind, mechanism)
        self.curve = mechanism
        self.width = mechanism.dimension
        self.moments = Moments(self.width)
        #: where each coordinate sits (grid points of a function, indices of a vector)
        self.points = [float(x) for x in points]
        self.mean_function = mean
        self.notes.append(note)

    def add(self, values: Sequence[Any]) -> None:
        matrix = _fast_matrix(values, self.width)
        if matrix is not None:
            self.records += len(matrix)
            self.moments.add(matrix)
            return
        rows: list[list[float]] = []
        for value in values:
            row = self._row(value)
            if row is None:
                self._skip(value)
            else:
                rows.append(row)
        if rows:
            self.records += len(rows)
            self.moments.add(np.array(rows, dtype=np.float64))

    def _row(self, value: object) -> list[float] | None:
        if not isinstance(value, list) or len(value) != self.width:
            return None
        row = []
        for item in value:
            number = _number(item)
            if number is None:
                return None
            row.append(number)
        return row

    def new_truth(self) -> CurveTruth:
        return CurveTruth(self.curve)

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        if self.records == 0:
            return entry
        est = self.mean_function(self.records, self.moments.mean, self.moments.variance)
        z = options.z
        block: dict[str, Any] = {
            "points": self.points,
            "mean": est.mean.tolist(),
            "stderr": est.stderr.tolist(),
            "ci_low": (est.mean - z * est.stderr).tolist(),
            "ci_high": (est.mean + z * est.stderr).tolist(),
            "stderr_population": [_clean(float(s)) for s in est.stderr_population],
            "ci_population_low": [_clean(float(v)) for v in est.mean - z * est.stderr_population],
            "ci_population_high": [_clean(float(v)) for v in est.mean + z * est.stderr_population],
            "bias_bound": est.bias_bound,
        }
        if isinstance(truth, CurveTruth) and truth.count:
            block["true"] = (truth.clipped_sum / truth.count).tolist()
            block["true_unclipped"] = (truth.raw_sum / truth.count).tolist()
            block["true_clipped_records"] = truth.clipped_rows
        entry["curve"] = block
        return entry

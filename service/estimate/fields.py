"""Per-field accumulators: what ``privstream estimate`` keeps while it reads.

Each released field gets one accumulator that validates the sanitized value
of every record, keeps the statistics its estimator needs (counts, moments,
observation histograms, OLH reports) and turns them into a report entry with
the estimator functions of ``service.mechanisms`` (the math lives there).
A value that is missing or malformed is skipped for that field and counted;
it never stops the read.

Beside each, a *truth* accumulator reads the raw records (``--truth``) the
way the sanitizer parses them and keeps the same population quantities, so
the report can set each estimate beside its true value.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from service.mechanisms import Mechanism, RandomizedResponse
from service.mechanisms import randomized_response as rr
from service.mechanisms.functional import FunctionalMechanism, estimate_mean_curve
from service.mechanisms.gaussian import (
    GaussianMechanism,
    VectorGaussianMechanism,
    estimate_vector_mean,
)
from service.mechanisms.integer_laplace import IntegerLaplaceMechanism
from service.mechanisms.laplace import (
    HistogramEstimate,
    LaplaceMechanism,
    LatticeHistogram,
    LatticeNoise,
    MeanEstimate,
)
from service.mechanisms.local_hashing import (
    OptimalLocalHashing,
    estimate_frequencies,
    olh_buckets,
)
from service.mechanisms.unary_encoding import (
    UnaryEncoding,
    estimate_item_frequencies_from_counts,
)
from service.pipeline.fields import FieldHandler

#: stands for a field the record does not have
MISSING: Any = object()
_TWO_64 = 2**64


@dataclass(frozen=True)
class Options:
    """What the report is asked for."""

    bins: int = 10
    confidence: float = 0.95
    #: per field: the candidate values (local hashing and set fields)
    candidates: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: bootstrap resamples of the histogram deconvolution
    resamples: int = 200
    #: without candidates, a hashed field takes the truth's most frequent values
    truth_candidates: int = 20

    @property
    def z(self) -> float:
        """The two-sided normal quantile of ``confidence``."""
        return NormalDist().inv_cdf(0.5 + self.confidence / 2.0)


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


def _interval(estimate: float, stderr: float, z: float) -> list[float | None]:
    if not math.isfinite(stderr):
        return [None, None]
    return [estimate - z * stderr, estimate + z * stderr]


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


class Truth(Protocol):
    """Population quantities of the raw records, for one field."""

    def add(self, parsed: Sequence[Any], raw: Sequence[Any]) -> None: ...


class Accumulator(Protocol):
    """What the reader feeds and the report reads, for one field."""

    name: str
    kind: str
    mechanism: Mechanism
    records: int
    skipped: Counter[str]
    notes: list[str]

    def add(self, values: Sequence[Any]) -> None: ...

    def new_truth(self) -> Truth: ...

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]: ...


class _Base:
    def __init__(self, name: str, kind: str, mechanism: Mechanism) -> None:
        self.name = name
        self.kind = kind
        self.mechanism = mechanism
        self.records = 0
        self.skipped: Counter[str] = Counter()
        self.notes: list[str] = []

    def _header(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "mechanism": self.mechanism.name,
            "epsilon": self.mechanism.epsilon,
            "delta": self.mechanism.delta,
            "records": self.records,
            "skipped": dict(sorted(self.skipped.items())),
            "notes": list(self.notes),
        }

    def _skip(self, value: object) -> None:
        self.skipped["missing" if value is MISSING else "invalid"] += 1


# --- categorical and boolean: randomized response ------------------------------------------


class CategoryTruth:
    def __init__(self, size: int) -> None:
        self.counts = np.zeros(size, dtype=np.int64)

    def add(self, parsed: Sequence[Any], raw: Sequence[Any]) -> None:
        self.counts += np.bincount(np.asarray(parsed, dtype=np.int64), minlength=len(self.counts))


class CategoryCounts(_Base):
    """Released domain values of a randomized-response field, counted."""

    def __init__(self, name: str, kind: str, mechanism: RandomizedResponse) -> None:
        super().__init__(name, kind, mechanism)
        self.rr = mechanism
        self.index = {(type(v), v): i for i, v in enumerate(mechanism.domain)}
        self.counts = np.zeros(len(mechanism.domain), dtype=np.int64)

    def add(self, values: Sequence[Any]) -> None:
        found: list[int] = []
        for value in values:
            try:
                position = self.index.get((type(value), value))
            except TypeError:  # an array or object: unhashable
                position = None
            if position is None:
                self._skip(value)
            else:
                found.append(position)
        self.records += len(found)
        if found:
            self.counts += np.bincount(found, minlength=len(self.counts))

    def new_truth(self) -> CategoryTruth:
        return CategoryTruth(len(self.counts))

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        entry["estimator"] = "randomized response inversion (c/n - p) / (1 - (m+1) p)"
        n = self.records
        true_share: NDArray[np.float64] | None = None
        if isinstance(truth, CategoryTruth) and truth.counts.sum() > 0:
            true_share = truth.counts / truth.counts.sum()
        if n == 0:
            entry["frequencies"] = []
            return entry
        estimates, stderr = rr.estimate_frequencies(self.counts, self.rr.epsilon, self.rr.delta)
        rows = []
        for i, value in enumerate(self.rr.domain):
            row: dict[str, Any] = {
                "value": value,
                "estimate": float(estimates[i]),
                "stderr": float(stderr[i]),
                "ci": _interval(float(estimates[i]), float(stderr[i]), options.z),
                "count": int(self.counts[i]),
                "raw_share": float(self.counts[i] / n),
            }
            if true_share is not None:
                row["true"] = float(true_share[i])
            rows.append(row)
        entry["frequencies"] = rows
        return entry


# --- categorical with local hashing ---------------------------------------------------------


class HashedTruth:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.total = 0

    def add(self, parsed: Sequence[Any], raw: Sequence[Any]) -> None:
        self.counts.update(parsed)
        self.total += len(parsed)


class HashedReports(_Base):
    """OLH reports ``{"seed": s, "bucket": y}``, kept for the candidates' support counts."""

    def __init__(self, name: str, kind: str, mechanism: OptimalLocalHashing) -> None:
        super().__init__(name, kind, mechanism)
        self.olh = mechanism
        self.buckets = olh_buckets(mechanism.epsilon)
        self.seeds: list[NDArray[np.uint64]] = []
        self.reports: list[NDArray[np.uint64]] = []

    def _valid(self, value: object) -> tuple[int, int] | None:
        if not isinstance(value, dict):
            return None
        seed, bucket = value.get("seed"), value.get("bucket")
        if type(seed) is not int or type(bucket) is not int:  # bool is not a report
            return None
        if not (0 <= seed < _TWO_64 and 0 <= bucket < self.buckets):
            return None
        return seed, bucket

    def add(self, values: Sequence[Any]) -> None:
        seeds: list[int] = []
        buckets: list[int] = []
        for value in values:
            report = self._valid(value)
            if report is None:
                self._skip(value)
            else:
                seeds.append(report[0])
                buckets.append(report[1])
        self.records += len(seeds)
        if seeds:
            self.seeds.append(np.array(seeds, dtype=np.uint64))
            self.reports.append(np.array(buckets, dtype=np.uint64))

    def new_truth(self) -> HashedTruth:
        return HashedTruth()

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        entry["estimator"] = "OLH support counts (c/n - 1/g) / (p - 1/g)"
        candidates = options.candidates.get(self.name)
        if candidates is None and isinstance(truth, HashedTruth) and truth.counts:
            top = truth.counts.most_common(options.truth_candidates)
            candidates = tuple(value for value, _ in top)
            entry["notes"].append(
                f"no --candidates for {self.name}: the truth's {len(candidates)} most frequent "
                "values are the candidates"
            )
        if not candidates:
            entry["notes"].append(
                f"no candidates: local hashing estimates only the values you name; pass "
                f"--candidates {self.name}=a,b,c"
            )
            entry["frequencies"] = []
            return entry
        if self.records == 0:
            entry["frequencies"] = []
            return entry
        seeds = np.concatenate(self.seeds)
        buckets = np.concatenate(self.reports)
        estimates, stderr = estimate_frequencies(seeds, buckets, candidates, self.olh.epsilon)
        rows = []
        for i, value in enumerate(candidates):
            row: dict[str, Any] = {
                "value": value,
                "estimate": float(estimates[i]),
                "stderr": float(stderr[i]),
                "ci": _interval(float(estimates[i]), float(stderr[i]), options.z),
            }
            if isinstance(truth, HashedTruth) and truth.total:
                row["true"] = truth.counts[value] / truth.total
            rows.append(row)
        entry["frequencies"] = rows
        return entry


# --- sets: unary encoding -------------------------------------------------------------------


class SetTruth:
    def __init__(self, size: int) -> None:
        self.counts = np.zeros(size, dtype=np.int64)
        self.total = 0

    def add(self, parsed: Sequence[Any], raw: Sequence[Any]) -> None:
        for positions in parsed:
            self.counts[positions] += 1
        self.total += len(parsed)


class SetReports(_Base):
    """Released sets (the universe items whose noisy bit is 1), counted per item."""

    def __init__(self, name: str, kind: str, mechanism: UnaryEncoding) -> None:
        super().__init__(name, kind, mechanism)
        self.unary = mechanism
        self.position = {item: j for j, item in enumerate(mechanism.universe)}
        self.counts = np.zeros(len(mechanism.universe), dtype=np.int64)

    def add(self, values: Sequence[Any]) -> None:
        for value in values:
            positions = self._positions(value)
            if positions is None:
                self._skip(value)
                continue
            self.counts[positions] += 1
            self.records += 1

    def _positions(self, value: object) -> list[int] | None:
        if not isinstance(value, list):
            return None
        positions = []
        for item in value:
            if not isinstance(item, str) or item not in self.position:
                return None
            positions.append(self.position[item])
        if len(set(positions)) != len(positions):
            return None
        return positions

    def new_truth(self) -> SetTruth:
        return SetTruth(len(self.counts))

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        entry["estimator"] = f"unary encoding ({self.unary.variant}) inversion (c/n - q) / (p - q)"
        if self.records == 0:
            entry["frequencies"] = []
            return entry
        estimates, stderr = estimate_item_frequencies_from_counts(
            self.counts,
            self.records,
            self.unary.epsilon,
            max_items=self.unary.max_items,
            variant=self.unary.variant,
        )
        wanted = options.candidates.get(self.name, self.unary.universe)
        rows = []
        for value in wanted:
            j = self.position[value]
            row: dict[str, Any] = {
                "value": value,
                "estimate": float(estimates[j]),
                "stderr": float(stderr[j]),
                "ci": _interval(float(estimates[j]), float(stderr[j]), options.z),
                "raw_share": float(self.counts[j] / self.records),
            }
            if isinstance(truth, SetTruth) and truth.total:
                row["true"] = float(truth.counts[j] / truth.total)
            rows.append(row)
        entry["frequencies"] = rows
        return entry


# --- real and integer: mean and histogram ---------------------------------------------------


NumericMechanism = LaplaceMechanism | GaussianMechanism | IntegerLaplaceMechanism
MeanFunction = Callable[[int, float, float], MeanEstimate]


def numeric_api(mechanism: NumericMechanism) -> tuple[LatticeNoise, MeanFunction]:
    """The lattice description and the mean estimator of a scalar numeric mechanism."""
    if isinstance(mechanism, LaplaceMechanism):
        from service.mechanisms import laplace

        return laplace.lattice_noise(mechanism), lambda n, m, v: laplace.estimate_mean(
            mechanism, n, m, v
        )
    if isinstance(mechanism, GaussianMechanism):
        from service.mechanisms import gaussian

        return gaussian.lattice_noise(mechanism), lambda n, m, v: gaussian.estimate_mean(
            mechanism, n, m, v
        )
    from service.mechanisms import integer_laplace

    return integer_laplace.lattice_noise(mechanism), lambda n, m, v: integer_laplace.estimate_mean(
        mechanism, n, m, v
    )


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


class ScalarReleases(_Base):
    """Released numbers of a real or integer field: moments and an observation histogram."""

    def __init__(
        self, name: str, kind: str, mechanism: NumericMechanism, bins: int, resamples: int
    ) -> None:
        super().__init__(name, kind, mechanism)
        self.numeric = mechanism
        self.integer = kind == "integer"
        lattice, self.mean_function = numeric_api(mechanism)
        self.histogram = LatticeHistogram(lattice, bins)
        self.resamples = resamples
        self.moments = Moments(1)
        self.observed = np.zeros(self.histogram.observation_bins, dtype=np.int64)
        self.notes.append(
            f"the mean estimates the mean of the values clamped into [{mechanism.lower:g}, "
            f"{mechanism.upper:g}]: values outside the bounds pull it inwards; the worker's "
            "privstream_field_clamped_total counts them"
        )

    def add(self, values: Sequence[Any]) -> None:
        column = _fast_column(values, self.integer)
        if column is not None:
            self.records += len(column)
            self.moments.add(column)
            self.observed += self.histogram.observe(column)
            return
        good: list[float] = []
        for value in values:
            number = _number(value)
            if number is None or (self.integer and not number.is_integer()):
                self._skip(value)
            else:
                good.append(number)
        if good:
            column = np.array(good, dtype=np.float64)
            self.records += len(good)
            self.moments.add(column)
            self.observed += self.histogram.observe(column)

    def new_truth(self) -> ScalarTruth:
        return ScalarTruth(float(self.numeric.lower), float(self.numeric.upper), self.histogram)

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        entry["bounds"] = [self.numeric.lower, self.numeric.upper]
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
            "ci": _interval(mean, stderr, z),
            "stderr_population": _clean(population),
            "ci_population": _interval(mean, population, z),
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


class CurveReleases(_Base):
    """Released vectors or sampled functions: per-point moments."""

    def __init__(
        self, name: str, kind: str, mechanism: VectorGaussianMechanism | FunctionalMechanism
    ) -> None:
        super().__init__(name, kind, mechanism)
        self.curve = mechanism
        self.width = mechanism.dimension
        self.moments = Moments(self.width)
        if isinstance(mechanism, FunctionalMechanism):
            self.notes.append(
                f"the mean curve estimates the mean of the curves clipped to the RKHS ball of "
                f"radius {mechanism.rkhs_radius:g}; the bands are pointwise, not simultaneous"
            )
        else:
            self.notes.append(
                f"the mean estimates the mean of the vectors clipped to the L2 ball of radius "
                f"{mechanism.l2_bound:g}; intervals are per coordinate"
            )

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
        if isinstance(self.curve, FunctionalMechanism):
            points = [float(x) for x in self.curve.grid_points]
        else:
            points = [float(j) for j in range(self.width)]
        if self.records == 0:
            return entry
        if isinstance(self.curve, FunctionalMechanism):
            est = estimate_mean_curve(
                self.curve, self.records, self.moments.mean, self.moments.variance
            )
        else:
            est = estimate_vector_mean(
                self.curve, self.records, self.moments.mean, self.moments.variance
            )
        z = options.z
        block: dict[str, Any] = {
            "points": points,
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


# --- building them from the plan -------------------------------------------------------------


def accumulator_for(
    handler: FieldHandler, kind: str, memo_field: str | None, options: Options
) -> Accumulator | None:
    """The accumulator of one released field, or None for public fields (nothing to estimate)."""
    mechanism = handler.mechanism
    name = handler.name
    made: Accumulator
    if mechanism is None:
        return None
    if isinstance(mechanism, RandomizedResponse):
        made = CategoryCounts(name, kind, mechanism)
    elif isinstance(mechanism, OptimalLocalHashing):
        made = HashedReports(name, kind, mechanism)
    elif isinstance(mechanism, UnaryEncoding):
        made = SetReports(name, kind, mechanism)
    elif isinstance(mechanism, LaplaceMechanism | GaussianMechanism | IntegerLaplaceMechanism):
        made = ScalarReleases(name, kind, mechanism, options.bins, options.resamples)
    elif isinstance(mechanism, VectorGaussianMechanism | FunctionalMechanism):
        made = CurveReleases(name, kind, mechanism)
    else:  # pragma: no cover -- every mechanism the plan builds is listed above
        return None
    if memo_field is not None:
        made.notes.append(
            f"memoize_by {memo_field}: a device's reports repeat one answer, so they are not "
            "independent; the intervals assume one report per device and are too narrow "
            "when devices report several times"
        )
    return made

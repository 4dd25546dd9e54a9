"""Each field kind's ``estimate`` accumulator, keyed like its registration.

``ESTIMATORS`` maps a registration's (kind, mechanism) to a function of
``(handler, kind, options)``; ``estimator_of`` looks a plan's field up. The
table is checked against the registry when this module loads
(``privstream.kinds.check_table``): a noised kind without an estimator is a
``RegistryError``, never a silent gap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from privstream.estimate.accumulators import Accumulator, Options, Truth
from privstream.estimate.distribution import SquareWaveReleases
from privstream.estimate.frequency import (
    CONSISTENT_CAVEAT,
    CategoryCounts,
    DomainCounts,
    HashedReports,
    SetReports,
    UnaryCategoryCounts,
    domain_rows,
    true_share,
)
from privstream.estimate.numeric import CurveReleases, NumericApi, ScalarReleases
from privstream.estimate.timestamps import TimestampReleases
from privstream.estimate.unit_mean import UnitMeanReleases
from privstream.kinds import check_table
from privstream.mechanisms import gaussian, integer_laplace, laplace
from privstream.mechanisms.consistency import project_to_simplex
from privstream.mechanisms.exponential import OrdinalExponential, estimate_frequencies
from privstream.mechanisms.functional import FunctionalMechanism, estimate_mean_curve
from privstream.mechanisms.gaussian import GaussianMechanism
from privstream.mechanisms.integer_laplace import IntegerLaplaceMechanism
from privstream.mechanisms.laplace import LaplaceMechanism
from privstream.mechanisms.subset_selection import SubsetSelection
from privstream.mechanisms.subset_selection import estimate_frequencies as subset_frequencies
from privstream.mechanisms.unit_interval import UnitIntervalMechanism
from privstream.mechanisms.vector_gaussian import VectorGaussianMechanism, estimate_vector_mean
from privstream.pipeline.plan import PlannedField


def category_counts(handler: Any, kind: str, options: Options) -> Accumulator:
    """Categorical and boolean fields (randomized response)."""
    return CategoryCounts(handler.name, kind, handler.mechanism)


def laplace_api(mechanism: LaplaceMechanism) -> NumericApi:
    return NumericApi(
        laplace.lattice_noise(mechanism),
        lambda n, m, v: laplace.estimate_mean(mechanism, n, m, v),
    )


def gaussian_api(mechanism: GaussianMechanism) -> NumericApi:
    return NumericApi(
        gaussian.lattice_noise(mechanism),
        lambda n, m, v: gaussian.estimate_mean(mechanism, n, m, v),
    )


def integer_laplace_api(mechanism: IntegerLaplaceMechanism) -> NumericApi:
    return NumericApi(
        integer_laplace.lattice_noise(mechanism),
        lambda n, m, v: integer_laplace.estimate_mean(mechanism, n, m, v),
    )


def _scalar(handler: Any, kind: str, options: Options, api: Any, integer: bool) -> Accumulator:
    return ScalarReleases(
        handler.name,
        kind,
        handler.mechanism,
        api=api(handler.mechanism),
        integer=integer,
        options=options,
    )


def laplace_releases(handler: Any, kind: str, options: Options) -> Accumulator:
    return _scalar(handler, kind, options, laplace_api, integer=False)


def gaussian_releases(handler: Any, kind: str, options: Options) -> Accumulator:
    return _scalar(handler, kind, options, gaussian_api, integer=False)


def integer_releases(handler: Any, kind: str, options: Options) -> Accumulator:
    return _scalar(handler, kind, options, integer_laplace_api, integer=True)


def timestamp_releases(handler: Any, kind: str, options: Options) -> Accumulator:
    """Noised timestamps: integer releases of the unit indices."""
    return TimestampReleases(handler, kind, options, integer_laplace_api(handler.mechanism))


def unit_mean_releases(handler: Any, kind: str, options: Options) -> Accumulator:
    """The reals of the local mechanisms (piecewise, PM-SUB, hybrid, duchi, three_outputs)."""
    mech = handler.mechanism
    if not isinstance(mech, UnitIntervalMechanism):  # the registry builds these only
        raise TypeError(f"{handler.name}: expected a unit-interval mechanism, got {mech.name}")
    return UnitMeanReleases(handler.name, kind, mech)


class OrdinalCounts(DomainCounts):
    """Released values of an ordinal field, counted; shares by transition-matrix inversion."""

    def __init__(self, name: str, kind: str, mechanism: OrdinalExponential) -> None:
        super().__init__(name, kind, mechanism)
        self.ordinal = mechanism

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        entry["estimator"] = "transition-matrix inversion (P^T)^-1 c/n"
        if self.records == 0:
            entry["frequencies"] = []
            return entry
        estimates, stderr = estimate_frequencies(self.ordinal, self.counts)
        entry["frequencies"] = domain_rows(self, estimates, stderr, options, true_share(truth))
        return entry


def ordinal_counts(handler: Any, kind: str, options: Options) -> Accumulator:
    return OrdinalCounts(handler.name, kind, handler.mechanism)


def hashed_reports(handler: Any, kind: str, options: Options) -> Accumulator:
    return HashedReports(handler.name, kind, handler.mechanism, handler.domain)


def set_reports(handler: Any, kind: str, options: Options) -> Accumulator:
    return SetReports(handler.name, kind, handler.mechanism)


def unary_category_counts(handler: Any, kind: str, options: Options) -> Accumulator:
    return UnaryCategoryCounts(handler.name, kind, handler.mechanism)


class SubsetCounts(DomainCounts):
    """Released arrays of a subset-selection field, counted per domain value they hold.

    A release is a JSON array of exactly ``d`` distinct domain values; anything
    else is skipped. ``records`` counts arrays.
    """

    def __init__(self, name: str, kind: str, mechanism: SubsetSelection) -> None:
        super().__init__(name, kind, mechanism)
        self.subset = mechanism

    def add(self, values: Sequence[Any]) -> None:
        for value in values:
            found = self._positions(value)
            if found is None:
                self._skip(value)
            else:
                self.counts[found] += 1
                self.records += 1

    def _positions(self, value: object) -> list[int] | None:
        """The positions of an array of ``d`` distinct domain values; None for anything else."""
        if not isinstance(value, list) or len(value) != self.subset.subset_size:
            return None
        try:
            found = [self.index.get((type(item), item)) for item in value]
        except TypeError:  # an unhashable item: an array or object
            return None
        known = [position for position in found if position is not None]
        return known if len(set(known)) == len(value) else None

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        entry["estimator"] = "subset selection inversion (c/n - q) / (p - q)"
        if self.records == 0:
            entry["frequencies"] = []
            return entry
        estimates, stderr = subset_frequencies(self.counts, self.records, self.subset)
        entry["frequencies"] = domain_rows(self, estimates, stderr, options, true_share(truth))
        if options.consistent:
            shares = project_to_simplex(estimates)
            for row, share in zip(entry["frequencies"], shares, strict=True):
                row["consistent"] = float(share)
            entry["notes"].append(CONSISTENT_CAVEAT)
        return entry


def square_wave_releases(handler: Any, kind: str, options: Options) -> Accumulator:
    return SquareWaveReleases(handler.name, kind, handler.mechanism, options.bins)


def subset_counts(handler: Any, kind: str, options: Options) -> Accumulator:
    return SubsetCounts(handler.name, kind, handler.mechanism)


def vector_releases(name: str, kind: str, mechanism: VectorGaussianMechanism) -> CurveReleases:
    """The accumulator of a vector field: per-coordinate means."""
    return CurveReleases(
        name,
        kind,
        mechanism,
        points=range(mechanism.dimension),
        mean=lambda n, m, v: estimate_vector_mean(mechanism, n, m, v),
        note=f"the mean estimates the mean of the vectors clipped to the L2 ball of radius "
        f"{mechanism.l2_bound:g}; intervals are per coordinate",
    )


def functional_releases(name: str, kind: str, mechanism: FunctionalMechanism) -> CurveReleases:
    """The accumulator of a functional field: the mean curve on the grid."""
    return CurveReleases(
        name,
        kind,
        mechanism,
        points=mechanism.grid_points.tolist(),
        mean=lambda n, m, v: estimate_mean_curve(mechanism, n, m, v),
        note=f"the mean curve estimates the mean of the curves clipped to the RKHS ball of "
        f"radius {mechanism.rkhs_radius:g}; the bands are pointwise, not simultaneous",
    )


def vector_field_releases(handler: Any, kind: str, options: Options) -> Accumulator:
    return vector_releases(handler.name, kind, handler.mechanism)


def functional_field_releases(handler: Any, kind: str, options: Options) -> Accumulator:
    return functional_releases(handler.name, kind, handler.mechanism)


Estimator = Callable[[Any, str, Options], Accumulator]

#: (kind, mechanism) of a registration -> its accumulator
ESTIMATORS: dict[tuple[str, str | None], Estimator] = {
    ("real", "laplace"): laplace_releases,
    ("real", "gaussian"): gaussian_releases,
    ("real", "piecewise"): unit_mean_releases,
    ("real", "hybrid"): unit_mean_releases,
    ("real", "duchi"): unit_mean_releases,
    ("real", "pm_sub"): unit_mean_releases,
    ("real", "three_outputs"): unit_mean_releases,
    ("integer", "piecewise"): unit_mean_releases,
    ("integer", "hybrid"): unit_mean_releases,
    ("integer", "duchi"): unit_mean_releases,
    ("integer", "pm_sub"): unit_mean_releases,
    ("integer", "three_outputs"): unit_mean_releases,
    ("real", "square_wave"): square_wave_releases,
    ("integer", "discrete_laplace"): integer_releases,
    ("categorical", "randomized_response"): category_counts,
    ("boolean", "randomized_response"): category_counts,
    ("categorical", "exponential"): ordinal_counts,
    ("categorical", "local_hashing"): hashed_reports,
    ("categorical", "unary_encoding"): unary_category_counts,
    ("categorical", "subset_selection"): subset_counts,
    ("set", "unary_encoding"): set_reports,
    ("vector", "gaussian"): vector_field_releases,
    ("functional", "gaussian_process"): functional_field_releases,
    ("timestamp", "discrete_laplace"): timestamp_releases,
}
check_table("privstream.estimate.by_kind", ESTIMATORS)


def estimator_of(planned: PlannedField) -> Estimator | None:
    """The accumulator of a plan's field; None for a field without noise."""
    return ESTIMATORS.get((planned.kind, planned.mechanism))

"""Observed error per field, compared with the expected error and the gamma lower bound.

Only the worker can measure ``rho(Y, d)``: it holds the raw value. What it
measures is ``Mechanism.noise_error``, the distance between the release and
the mechanism's own input (clamped, on its grid): a function of the noise
alone, which is drawn independently of the data. So these aggregates —
histogram, mean, ratio to the gamma bound — tell nothing about the records
that the noise distribution does not already say. The clamped-value count is
the exception: it is a count of raw values outside the declared bounds, an
aggregate side channel (turn it off with ``metrics.clamped_counts: false``).

Errors are accumulated with numpy per batch (one ``bincount`` per field),
not one Python call per value, and exported by a custom collector.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from service.pipeline import RecordPlan
from service.pipeline.results import Observation

#: histogram bucket bounds, as multiples of the field's expected error
BUCKET_MULTIPLES = (0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0)


def error_buckets(expected_error: float) -> NDArray[np.float64]:
    """Upper bounds (``le``) scaled to the mechanism: finer around the expected error."""
    if not expected_error > 0.0:
        return np.array([0.0])
    return np.array([m * expected_error for m in BUCKET_MULTIPLES])


@dataclass
class _Field:
    mechanism: str
    expected_error: float
    gamma: float
    bounds: NDArray[np.float64]
    counts: NDArray[np.int64] = field(init=False)
    total: float = 0.0
    count: int = 0
    clamped: int = 0

    def __post_init__(self) -> None:
        self.counts = np.zeros(len(self.bounds) + 1, dtype=np.int64)  # last: above all bounds

    def add(self, errors: NDArray[np.float64]) -> None:
        slots = np.searchsorted(self.bounds, errors, side="left")  # first bound >= error
        self.counts += np.bincount(slots, minlength=len(self.counts))
        self.total += float(errors.sum())
        self.count += len(errors)


class FieldErrors(Collector):
    """Accumulates ``Observation``s of the plan's noised fields; a Prometheus collector."""

    def __init__(self, plan: RecordPlan, *, clamped_counts: bool = True) -> None:
        self._clamped_counts = clamped_counts
        self._fields: dict[str, _Field] = {}
        for handler in plan.handlers:
            mech = handler.mechanism
            if mech is not None:
                bounds = error_buckets(mech.expected_error)
                self._fields[handler.name] = _Field(
                    mech.name, mech.expected_error, mech.gamma_lower_bound, bounds
                )

    def observe(self, observations: Mapping[str, Observation]) -> None:
        for name, seen in observations.items():
            state = self._fields[name]
            if seen.error is not None and len(seen.error):
                state.add(seen.error)
            state.clamped += seen.clamped

    def mean(self, name: str) -> float | None:
        state = self._fields[name]
        return state.total / state.count if state.count else None

    def collect(self) -> Iterator[HistogramMetricFamily | GaugeMetricFamily | CounterMetricFamily]:
        labels = ["field", "mechanism"]
        histogram = HistogramMetricFamily(
            "privstream_field_observed_error",
            "Observed error rho(Y, d) of released values (d clamped, on the mechanism's grid)",
            labels=labels,
        )
        mean = GaugeMetricFamily(
            "privstream_field_observed_error_mean",
            "Running mean of the observed error since start",
            labels=labels,
        )
        ratio = GaugeMetricFamily(
            "privstream_field_error_ratio_to_gamma",
            "Observed mean error divided by the gamma lower bound (>= 1 up to sampling error)",
            labels=labels,
        )
        clamped = CounterMetricFamily(
            "privstream_field_clamped",
            "Raw values outside the declared bounds (clamped): an aggregate side channel",
            labels=labels,
        )
        for name, state in self._fields.items():
            values = [name, state.mechanism]
            if self._clamped_counts:
                clamped.add_metric(values, state.clamped)
            if not state.count:
                continue
            cumulative = np.cumsum(state.counts)
            buckets = [(f"{b:.6g}", int(c)) for b, c in zip(state.bounds, cumulative, strict=False)]
            buckets.append(("+Inf", int(cumulative[-1])))
            histogram.add_metric(values, buckets, state.total)
            mean.add_metric(values, state.total / state.count)
            if state.gamma > 0.0:
                ratio.add_metric(values, state.total / state.count / state.gamma)
        yield from (histogram, mean, ratio)
        if self._clamped_counts:
            yield clamped

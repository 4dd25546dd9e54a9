"""Error versus the gamma bound, per field, measured on shadow (canary) draws.

The worker cannot export the error of the values it releases: the release
``y`` is public, so ``|y - x|`` (a histogram's sum, a running mean, a bucket
count) gives the raw ``x`` back to whoever reads both ``/metrics`` and the
sanitized topic. What it exports is the error of *shadow draws*: after a batch (at
most once per ``metrics.canary_interval_seconds``),
each measurable field's mechanism releases a fixed set of canary inputs with
noise drawn for the purpose (``privstream.pipeline.canary``), and these
aggregates — histogram, mean, ratio to the gamma bound — are built from those
canary errors only. They are independent of every raw value and of every
released record, and a mis-calibrated or broken sampler shows in them as it
would in the real errors.

Errors are accumulated with numpy per round (one ``bincount`` per field) and
exported by a custom collector.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector

from privstream.mechanisms.base import CanaryLaw
from privstream.pipeline import RecordPlan

#: histogram bucket bounds, as multiples of the field's expected error
BUCKET_MULTIPLES = (0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0)
#: what every family's help text says the numbers are
MEASURED = "shadow draws on canary inputs, independent of every released record and raw value"


def error_buckets(expected_error: float) -> NDArray[np.float64]:
    """Upper bounds (``le``) scaled to the mechanism: finer around the expected error."""
    if not expected_error > 0.0:
        return np.array([0.0])
    return np.array([m * expected_error for m in BUCKET_MULTIPLES])


@dataclass
class _Field:
    mechanism: str
    law: CanaryLaw
    gamma: float
    bounds: NDArray[np.float64]
    counts: NDArray[np.int64] = field(init=False)
    total: float = 0.0
    count: int = 0
    #: sums of the positive and of the negative parts of ``y - d`` (two monotone counters:
    #: their windowed difference over the count is the signed mean, and rate() works on both)
    overshoot: float = 0.0
    undershoot: float = 0.0

    def __post_init__(self) -> None:
        self.counts = np.zeros(len(self.bounds) + 1, dtype=np.int64)  # last: above all bounds

    def add(self, errors: NDArray[np.float64]) -> None:
        slots = np.searchsorted(self.bounds, errors, side="left")  # first bound >= error
        self.counts += np.bincount(slots, minlength=len(self.counts))
        self.total += float(errors.sum())
        self.count += len(errors)

    def add_signed(self, signed: NDArray[np.float64]) -> None:
        self.overshoot += float(np.maximum(signed, 0.0).sum())
        self.undershoot += float(np.maximum(-signed, 0.0).sum())


class CanaryErrors(Collector):
    """Accumulates the canary errors of the measured fields; a Prometheus collector.

    ``laws`` names them, with the exact expectations of their statistics at
    the canary inputs (``Canaries.laws``). Their histograms are exported
    from the start, at zero: a series that appeared only with its first batch
    would make Prometheus extrapolate ``_sum`` and ``_count`` to a window's start
    by different amounts, biasing the rules' windowed mean on young series.
    """

    def __init__(self, plan: RecordPlan, laws: Mapping[str, CanaryLaw]) -> None:
        self._fields: dict[str, _Field] = {}
        # /metrics renders on the HTTP thread while the worker observes: a scrape must not
        # see a round's bucket counts without its sum
        self._lock = threading.Lock()
        for handler in plan.handlers:
            mech = handler.mechanism
            if mech is not None and handler.name in laws:
                bounds = error_buckets(mech.expected_error)
                self._fields[handler.name] = _Field(
                    mech.name, laws[handler.name], mech.gamma_lower_bound, bounds
                )

    def observe(
        self,
        errors: Mapping[str, NDArray[np.float64]],
        signed: Mapping[str, NDArray[np.float64]] | None = None,
    ) -> None:
        """Add one round of canary errors and signed errors (``Canaries.draw``), by field name."""
        with self._lock:
            for name, values in errors.items():
                if len(values):
                    self._fields[name].add(values)
            for name, values in (signed or {}).items():
                self._fields[name].add_signed(values)

    def mean(self, name: str) -> float | None:
        state = self._fields[name]
        return state.total / state.count if state.count else None

    def collect(self) -> Iterator[HistogramMetricFamily | GaugeMetricFamily | CounterMetricFamily]:
        families = _Families()
        with self._lock:
            for name, state in self._fields.items():
                families.add([name, state.mechanism], state)
        yield from families.all()


class _Families:
    """The exported families, filled field by field."""

    def __init__(self) -> None:
        labels = ["field", "mechanism"]

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=labels)

        self.histogram = HistogramMetricFamily(
            "privstream_field_canary_error",
            f"Error rho(Y, d) of the field's mechanism on {MEASURED}",
            labels=labels,
        )
        self.mean = gauge(
            "privstream_field_canary_error_mean", f"Mean error since start of {MEASURED}"
        )
        self.ratio = gauge(
            "privstream_field_canary_error_ratio_to_gamma",
            f"Mean error of {MEASURED}, divided by the gamma lower bound "
            "(>= 1 up to sampling error)",
        )
        self.expected = gauge(
            "privstream_field_canary_expected_error",
            "Exact expectation of the mean canary error rho(Y, d) at the field's canary inputs",
        )
        self.second_moment = gauge(
            "privstream_field_canary_error_second_moment",
            "Upper bound on the mean E[(Y - d)^2] at the field's canary inputs "
            "(squared field units)",
        )
        self.bias = gauge(
            "privstream_field_canary_bias_bound",
            "Upper bound on |E[mean(Y - d)]| at the field's canary inputs (a correct sampler)",
        )
        self.overshoot = counter(
            "privstream_field_canary_overshoot",
            f"Sum of the positive parts of Y - d on {MEASURED}",
        )
        self.undershoot = counter(
            "privstream_field_canary_undershoot",
            f"Sum of the positive parts of d - Y on {MEASURED}",
        )

    def add(self, values: list[str], state: _Field) -> None:
        cumulative = np.cumsum(state.counts)
        bounds = zip(state.bounds, cumulative, strict=False)
        buckets = [(f"{b:.6g}", int(c)) for b, c in bounds]
        buckets.append(("+Inf", int(cumulative[-1])))
        self.histogram.add_metric(values, buckets, state.total)
        self.expected.add_metric(values, state.law.error)
        if state.law.second_moment is not None:
            self.second_moment.add_metric(values, state.law.second_moment)
        if state.law.bias is not None:
            self.bias.add_metric(values, state.law.bias)
            self.overshoot.add_metric(values, state.overshoot)
            self.undershoot.add_metric(values, state.undershoot)
        if not state.count:
            return
        self.mean.add_metric(values, state.total / state.count)
        if state.gamma > 0.0:
            self.ratio.add_metric(values, state.total / state.count / state.gamma)

    def all(self) -> tuple[HistogramMetricFamily | GaugeMetricFamily | CounterMetricFamily, ...]:
        return (
            self.histogram, self.mean, self.ratio, self.expected, self.second_moment,
            self.bias, self.overshoot, self.undershoot,
        )  # fmt: skip

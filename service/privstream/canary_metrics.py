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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

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
    expected_error: float
    gamma: float
    bounds: NDArray[np.float64]
    counts: NDArray[np.int64] = field(init=False)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = np.zeros(len(self.bounds) + 1, dtype=np.int64)  # last: above all bounds

    def add(self, errors: NDArray[np.float64]) -> None:
        slots = np.searchsorted(self.bounds, errors, side="left")  # first bound >= error
        self.counts += np.bincount(slots, minlength=len(self.counts))
        self.total += float(errors.sum())
        self.count += len(errors)


class CanaryErrors(Collector):
    """Accumulates the canary errors of the measured fields; a Prometheus collector.

    ``measured`` names them (``Canaries.fields``). Their histograms are exported
    from the start, at zero: a series that appeared only with its first batch
    would make Prometheus extrapolate ``_sum`` and ``_count`` to a window's start
    by different amounts, biasing the rules' windowed mean on young series.
    """

    def __init__(self, plan: RecordPlan, measured: Iterable[str]) -> None:
        names = set(measured)
        self._fields: dict[str, _Field] = {}
        # /metrics renders on the HTTP thread while the worker observes: a scrape must not
        # see a round's bucket counts without its sum
        self._lock = threading.Lock()
        for handler in plan.handlers:
            mech = handler.mechanism
            if mech is not None and handler.name in names:
                bounds = error_buckets(mech.expected_error)
                self._fields[handler.name] = _Field(
                    mech.name, mech.expected_error, mech.gamma_lower_bound, bounds
                )

    def observe(self, errors: Mapping[str, NDArray[np.float64]]) -> None:
        """Add one round of canary errors (``Canaries.draw``), by field name."""
        with self._lock:
            for name, values in errors.items():
                if len(values):
                    self._fields[name].add(values)

    def mean(self, name: str) -> float | None:
        state = self._fields[name]
        return state.total / state.count if state.count else None

    def collect(self) -> Iterator[HistogramMetricFamily | GaugeMetricFamily]:
        labels = ["field", "mechanism"]
        histogram = HistogramMetricFamily(
            "privstream_field_canary_error",
            f"Error rho(Y, d) of the field's mechanism on {MEASURED}",
            labels=labels,
        )
        mean = GaugeMetricFamily(
            "privstream_field_canary_error_mean",
            f"Mean error since start of {MEASURED}",
            labels=labels,
        )
        ratio = GaugeMetricFamily(
            "privstream_field_canary_error_ratio_to_gamma",
            f"Mean error of {MEASURED}, divided by the gamma lower bound "
            "(>= 1 up to sampling error)",
            labels=labels,
        )
        with self._lock:
            for name, state in self._fields.items():
                values = [name, state.mechanism]
                cumulative = np.cumsum(state.counts)
                bounds = zip(state.bounds, cumulative, strict=False)
                buckets = [(f"{b:.6g}", int(c)) for b, c in bounds]
                buckets.append(("+Inf", int(cumulative[-1])))
                histogram.add_metric(values, buckets, state.total)
                if not state.count:
                    continue
                mean.add_metric(values, state.total / state.count)
                if state.gamma > 0.0:
                    ratio.add_metric(values, state.total / state.count / state.gamma)
        yield from (histogram, mean, ratio)

r"""Per-field clamped counts, released with discrete Laplace noise per fixed window.

How many raw values of a field fell outside its bounds is a function of the
raw values: exported as is, a scrape after a single-record batch says whether
that record's value was extreme. So the counts are off by default
(``metrics.clamped_counts``) and, when on, released under DP:

* Time is cut into fixed windows of ``window_seconds`` from the worker's
  start. A record is counted once, in the window in which its batch
  committed (observations are taken after the commit; a replayed batch was
  never counted), and the cut depends on time only, never on values.
* When a window ends, each of the ``F`` clamping fields (real and integer)
  publishes ``c_f + Z_f``: ``c_f`` its count in the window, ``Z_f`` discrete
  Laplace with ``t = F / epsilon`` (``P(Z = z) ~ e^(-|z| / t)``), fresh from
  the kernel CSPRNG. The published gauge holds the last window's value.

Guarantee. Replacing, adding or removing one record changes each ``c_f`` by
at most 1, so the vector ``(c_f)`` by at most ``F`` in L1. Discrete Laplace
with ``t = F / epsilon`` makes the privacy loss of the vector at most
``sum_f |dc_f| / t <= F / t = epsilon`` (the geometric mechanism, Ghosh,
Roughgarden, Sundararajan 2009): pure ``epsilon``-DP per window. As
implemented, each coordinate's sampler is calibrated on its *realised*
profile at ``epsilon / F`` for a change of 1
(``privstream.mechanisms.discrete_laplace.calibrate``), so the bound holds for
what is sampled, not only for the ideal distribution. A record
lies in one window only, so the whole series is ``epsilon``-DP for it
(parallel composition). This adds to the record's guarantee from its field
releases (basic composition): ``privstream explain`` prints both and their
sum; a group of ``k`` records pays ``k epsilon``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping

import numpy as np
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from privstream.errors import MisuseError
from privstream.mechanisms import NoiseSource, OsEntropy
from privstream.mechanisms.discrete_laplace import calibrate
from privstream.pipeline import RecordPlan
from privstream.pipeline.handlers import IntegerHandler, RealHandler
from privstream.pipeline.results import Observation


def clamping_fields(plan: RecordPlan) -> dict[str, str]:
    """The fields whose raw values can be clamped, with their mechanism names."""
    return {
        h.name: h.mechanism.name
        for h in plan.handlers
        if isinstance(h, RealHandler | IntegerHandler) and h.mechanism is not None
    }


class NoisyClampedCounts(Collector):
    """Accumulates clamped counts per window; publishes each ended window with noise."""

    def __init__(
        self,
        plan: RecordPlan,
        *,
        epsilon: float,
        window_s: float,
        source: NoiseSource | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (epsilon > 0.0 and window_s > 0.0):
            raise MisuseError(
                f"clamped counts need epsilon > 0 and a window > 0, got epsilon {epsilon} "
                f"and window {window_s} s; set metrics.clamped_counts epsilon and window_seconds"
            )
        self.epsilon = epsilon
        self.window_s = window_s
        self._mechanisms = clamping_fields(plan)
        self._names = tuple(self._mechanisms)
        # each count at epsilon / F for a change of 1, on the sampler's realised profile
        self._noise = calibrate(epsilon / max(len(self._names), 1), 0.0, 1)
        self._source: NoiseSource = OsEntropy() if source is None else source
        self._clock = clock
        self._end = clock() + window_s
        self._counts = np.zeros(len(self._names), dtype=np.int64)
        self._published: dict[str, int] = {}
        # /metrics renders on the HTTP thread while the worker observes: one window must
        # never be rolled twice (two noise draws for the same counts: a second release)
        self._lock = threading.Lock()

    def observe(self, observations: Mapping[str, Observation]) -> None:
        """Count one committed batch's clamped values in the current window."""
        with self._lock:
            self._roll()
            for j, name in enumerate(self._names):
                seen = observations.get(name)
                if seen is not None:
                    self._counts[j] += seen.clamped

    def _roll(self) -> None:
        """Publish the window if it ended (the caller holds ``_lock``)."""
        now = self._clock()
        if now < self._end or not self._names:
            return
        noise = self._noise.sample(self._source, len(self._names))
        self._published = dict(zip(self._names, (self._counts + noise).tolist(), strict=True))
        self._counts[:] = 0
        # the next boundary after now, on the fixed grid of windows
        self._end += self.window_s * (math.floor((now - self._end) / self.window_s) + 1)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            self._roll()  # a scrape closes an ended window even when no batch came
            published = dict(self._published)
        counts = GaugeMetricFamily(
            "privstream_field_clamped_noisy",
            f"Raw values outside the bounds in the last {self.window_s:g} s window, plus "
            f"discrete Laplace noise: epsilon {self.epsilon:g} per record, all fields together",
            labels=["field", "mechanism"],
        )
        for name, value in published.items():
            counts.add_metric([name, self._mechanisms[name]], value)
        yield counts
        yield GaugeMetricFamily(
            "privstream_clamped_counts_epsilon",
            "Epsilon per record of the noisy clamped counts, on top of the field releases'",
            value=self.epsilon,
        )

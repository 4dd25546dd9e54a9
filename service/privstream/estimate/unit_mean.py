r"""The mean of a real field released by piecewise, hybrid or duchi, with a 95% interval.

Each release is ``mid + half y`` with ``E[y | t] = t`` (``t`` the clamped
value in ``[-1, 1]``, ``privstream.mechanisms.piecewise``), so the mean of
the releases estimates the mean of the clamped values, up to the
mechanism's ``bias_bound``.

The interval (``ci``) is the CLT interval for the mean of *these records'*
clamped values: given the data the reports are independent and bounded
(Lindeberg holds), with ``Var(mean) = sum_i Var[y_i | t_i] / n^2``. The
mechanisms give their exact variance law ``Var[y | t] = s t^2 + c``, and
``E[y^2 | t] = (1 + s) t^2 + c``, so::

    V_hat = s (mean(y^2) - c) / (1 + s) + c

is an unbiased estimate of ``sum_i Var[y_i | t_i] / n`` (clipped to the
law's range ``[c + min(s, 0), c + max(s, 0)]``). Duchi's mechanism alone
(``duchi``, and hybrid below eps*) has ``s = -1``: its reports are ``+-B``,
``y^2`` is constant, and ``c - mean(y)^2`` takes the place of ``V_hat`` (an
upper bound up to the noise of ``mean(y)``: ``mean(t^2) >= mean(t)^2``; the
difference, at most 1, is small beside ``c = B^2 >= 11`` below eps*, not
above: there the interval is conservative for data spread towards both
bounds, exact for data at one value). Three-Outputs' law has an ``|t|`` term
too, ``Var[y | t] = E[y^2 | t] - t^2``, and ``mean(y^2) - mean(y)^2`` takes
its place the same way. Why not the alternatives:
the worst-case bound (``estimator_variance``, shown as
``stderr_worst_case``) over-covers wherever the values sit inside the
bounds (PM's variance at ``t = 0`` is a third of its worst case at
eps 4); the sample variance of the releases (``stderr_population``, the
interval for the mean of a population the records are drawn from) adds the
spread of the true values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from privstream.estimate.accumulators import BaseAccumulator, Options, Truth, interval
from privstream.estimate.numeric import Moments, _clean, real_column
from privstream.mechanisms.unit_interval import UnitIntervalMechanism

#: why a mean-oriented mechanism gives no histogram, said in place of one
NO_HISTOGRAM = (
    "{0} releases are built for the mean, not the distribution: a report is not the value "
    "plus noise independent of it (Duchi's part puts every report on one of two values), so "
    "no deconvolution can recover bin shares; a field released with mechanism: laplace "
    "gets a deconvolved histogram"
)
#: below this ``1 + s``, ``E[y^2]`` says (almost) nothing of ``t^2`` (Duchi's mechanism alone)
_IDENTIFIABLE = 1e-6


class MeanTruth:
    """The clamped and raw means of the true values of one field."""

    def __init__(self, lower: float, upper: float) -> None:
        self.lower, self.upper = lower, upper
        self.count = 0
        self.raw_sum = 0.0
        self.clamped_sum = 0.0
        self.outside = 0

    def add(self, parsed: Sequence[Any], raw: Sequence[Any]) -> None:
        values = np.array([float(v) for v in raw], dtype=np.float64)
        clamped = np.clip(values, self.lower, self.upper)
        self.count += len(values)
        self.raw_sum += float(values.sum())
        self.clamped_sum += float(clamped.sum())
        self.outside += int(np.count_nonzero(clamped != values))


def law_variance(mechanism: UnitIntervalMechanism, mean: float, second: float) -> float:
    """``V_hat`` (module docstring) from the mean of ``y`` and of ``y^2``, in ``t`` units."""
    law = mechanism.variance_law()
    slope, constant = law.square, law.constant
    if law.absolute != 0.0:  # E[y^2] mixes mean|t| and mean t^2: V = E[y^2] - mean t^2
        estimate = second - mean * mean
    elif 1.0 + slope > _IDENTIFIABLE:
        estimate = slope * (second - constant) / (1.0 + slope) + constant
    else:  # Duchi alone: y^2 = B^2 always; mean(t^2) >= mean(t)^2 and s < 0 bound it
        estimate = constant + slope * mean * mean
    low, high = law.extremes()
    return min(max(estimate, low), high)


class UnitMeanReleases(BaseAccumulator):
    """Released numbers of a piecewise, hybrid or duchi real field: the mean and intervals."""

    def __init__(self, name: str, kind: str, mechanism: UnitIntervalMechanism) -> None:
        super().__init__(name, kind, mechanism)
        self.unit = mechanism
        self.moments = Moments(1)
        #: values farther from the centre than any report can be: impossible in releases
        self.off_grid = 0
        self.notes.append(
            f"the mean estimates the mean of the values clamped into [{mechanism.lower:g}, "
            f"{mechanism.upper:g}]"
        )

    def add(self, values: Sequence[Any]) -> None:
        column = real_column(values, self._skip)
        if not len(column):
            return
        mech = self.unit
        t = (column - mech.middle) / (mech.half or 1.0)  # lo == hi: every release is mid
        reach = mech.half * mech.reach * (1.0 + 1e-9)
        self.off_grid += int(np.count_nonzero(np.abs(column - mech.middle) > reach))
        self.records += len(column)
        self.moments.add(t)

    def new_truth(self) -> MeanTruth:
        return MeanTruth(self.unit.lower, self.unit.upper)

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        mech = self.unit
        entry["bounds"] = [mech.lower, mech.upper]
        entry["off_grid"] = self.off_grid
        entry["no_histogram"] = NO_HISTOGRAM.format(mech.name)
        if self.records == 0:
            return entry
        n, z = self.records, options.z
        mean_t = float(self.moments.mean[0])
        spread = float(self.moments.variance[0]) if n > 1 else math.nan
        second = mean_t**2 + (float(self.moments.m2[0]) / n)
        noise = law_variance(mech, mean_t, second) if mech.diameter > 0 else 0.0
        estimate = mech.middle + mech.half * mean_t
        stderr = mech.half * math.sqrt(noise / n)
        population = mech.half * math.sqrt(spread / n) if n > 1 else math.nan
        worst = math.sqrt(mech.estimator_variance(n))
        block: dict[str, Any] = {
            "estimate": estimate,
            "stderr": stderr,
            "ci": interval(estimate, stderr, z),
            "stderr_method": "mechanism variance law, unbiased plug-in (given the records)",
            "stderr_worst_case": worst,
            "stderr_population": _clean(population),
            "ci_population": interval(estimate, population, z),
            "bias_bound": mech.bias_bound(),
        }
        if isinstance(truth, MeanTruth) and truth.count:
            block["true"] = truth.clamped_sum / truth.count
            block["true_unclamped"] = truth.raw_sum / truth.count
            block["true_outside_bounds"] = truth.outside
        entry["mean"] = block
        return entry

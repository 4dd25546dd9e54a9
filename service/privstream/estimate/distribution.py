r"""The histogram of a real field released by Square Wave (``target: distribution``).

Each release is one cell of the mechanism's grid (``cells_of``); the counts of
the cells are fitted by EM with smoothing to the exact law of the sampler
averaged over each bin (``privstream.mechanisms.square_wave``: ``bin_law``,
``ems_histogram``), giving the shares of the clamped values in ``bins`` equal
bins over the bounds.

The EM fits ``fine_bins`` (at least 256) fine bins, summed into the report's.

Intervals: ``estimate -/+ z sqrt(stderr^2 + bias^2)``. The standard error is
a parametric bootstrap: up to ``MAX_RESAMPLES`` sets of observation counts
drawn from the fitted law (multinomial, ``n`` records, a fixed seed, so the
report is a deterministic function of the releases), each refitted from the
uniform start. The bias bounds the smoothing's error without noise over the
steps the data could be (``smoothing_bias``: it reads only the mechanism,
the bins and ``n``). A point mass near a bin edge is not bounded (the docs
say so); what the intervals cover is measured in
``tests/unit/estimate/test_distribution.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from privstream.estimate.accumulators import BaseAccumulator, Options, Truth, interval
from privstream.estimate.numeric import _clean, real_column
from privstream.mechanisms.square_wave import (
    SquareWaveMechanism,
    bin_law,
    ems_histogram,
    fine_bins,
    pooled,
)

#: bootstrap refits at most (each is a whole EM from the uniform start)
MAX_RESAMPLES = 50
#: what the table says of the intervals
INTERVALS = (
    "+- z sqrt(stderr^2 + bias^2): a parametric bootstrap, and the smoothing's largest "
    "error without noise over steps at the bins' edges (conservative for smooth data)"
)


class BinTruth:
    """The shares of the true (clamped) values in the report's bins."""

    def __init__(self, mechanism: SquareWaveMechanism, bins: int) -> None:
        self.mechanism = mechanism
        self.counts = np.zeros(bins, dtype=np.int64)

    def add(self, parsed: Sequence[Any], raw: Sequence[Any]) -> None:
        values = np.array([float(v) for v in raw], dtype=np.float64)
        if len(values):
            self.counts += np.bincount(
                bin_of(self.mechanism.to_unit(values), len(self.counts)), minlength=len(self.counts)
            )


def bin_of(unit: NDArray[np.float64], bins: int) -> NDArray[np.int64]:
    """The bin of each value in ``[0, 1]`` units (the upper bound in the last bin)."""
    return np.minimum((unit * bins).astype(np.int64), bins - 1)


class SquareWaveReleases(BaseAccumulator):
    """Released numbers of a square_wave real field: the cell counts, then the histogram."""

    def __init__(self, name: str, kind: str, mechanism: SquareWaveMechanism, bins: int) -> None:
        super().__init__(name, kind, mechanism)
        self.square = mechanism
        self.bins = bins
        self.counts = np.zeros(mechanism.grid.cells, dtype=np.int64)
        #: values that are no report of this grid: impossible in its releases
        self.off_grid = 0
        self.notes.append(
            f"square_wave releases the distribution of the values clamped into "
            f"[{mechanism.lower:g}, {mechanism.upper:g}] as a histogram; it gives no mean "
            "(choose a mean mechanism for that)"
        )

    def add(self, values: Sequence[Any]) -> None:
        column = real_column(values, self._skip)
        cells = self.square.cells_of(column)
        self.off_grid += int(np.count_nonzero(cells < 0))
        self.records += int(np.count_nonzero(cells >= 0))
        self.counts += np.bincount(cells[cells >= 0], minlength=len(self.counts))

    def _noisy_shares(self) -> NDArray[np.float64]:
        """The share of releases in each bin (those past a bound in the bin at that bound)."""
        at = bin_of(np.clip(self.square.positions, 0.0, 1.0), self.bins)
        weights = self.counts.astype(np.float64)
        shares = np.bincount(at, weights=weights, minlength=self.bins).astype(np.float64)
        out: NDArray[np.float64] = shares / self.records
        return out

    def new_truth(self) -> BinTruth:
        return BinTruth(self.square, self.bins)

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = self._header()
        mech = self.square
        entry["bounds"] = [mech.lower, mech.upper]
        entry["off_grid"] = self.off_grid
        if self.records == 0 or mech.diameter == 0.0:
            return entry
        fine = fine_bins(self.bins)
        design = bin_law(mech, fine)
        counts = pooled(self.counts)
        fitted = ems_histogram(counts, design)
        shares = fitted.reshape(self.bins, -1).sum(axis=1)
        stderr = _bootstrap(design, fitted, self.records, self.bins, options)
        bias = smoothing_bias(mech, design, self.bins, self.records)
        edges = mech.lower + mech.diameter * np.arange(self.bins + 1) / self.bins
        noisy = self._noisy_shares()
        true = None
        if isinstance(truth, BinTruth) and truth.counts.sum():
            true = truth.counts / truth.counts.sum()
        rows = []
        for b in range(self.bins):
            row: dict[str, Any] = {
                "lower": float(edges[b]),
                "upper": float(edges[b + 1]),
                "estimate": float(shares[b]),
                "stderr": _clean(float(stderr[b])),
                "bias": float(bias[b]),
                "ci": _within(
                    interval(float(shares[b]), math.hypot(stderr[b], bias[b]), options.z)
                ),
                "noisy_share": float(noisy[b]),
            }
            if true is not None:
                row["true"] = float(true[b])
            rows.append(row)
        entry["histogram"] = {
            "method": (
                f"EM with smoothing on {fine} fine bins and the exact law of the sampler "
                f"(Li et al. 2020); parametric bootstrap standard errors "
                f"({min(options.resamples, MAX_RESAMPLES)} resamples)"
            ),
            "integer_bins": False,
            "intervals": INTERVALS,
            "bins": rows,
        }
        return entry


def _bootstrap(
    design: NDArray[np.float64], fitted: NDArray[np.float64], n: int, bins: int, options: Options
) -> NDArray[np.float64]:
    """Each bin's bootstrap standard error (NaN below two resamples): ``n`` records redrawn
    from the fitted observation law, refitted from the uniform start (a fixed seed)."""
    resamples = min(options.resamples, MAX_RESAMPLES)
    if resamples < 2:
        return np.full(bins, np.nan)
    law = design @ fitted
    rng = np.random.Generator(np.random.PCG64(0))
    refits = np.array(
        [
            ems_histogram(rng.multinomial(n, law / law.sum()).astype(np.float64), design)
            for _ in range(resamples)
        ]
    )
    stderr: NDArray[np.float64] = (
        refits.reshape(resamples, bins, -1).sum(axis=2).std(axis=0, ddof=1)
    )
    return stderr


def smoothing_bias(
    mechanism: SquareWaveMechanism, design: NDArray[np.float64], bins: int, n: int
) -> NDArray[np.float64]:
    """Each bin's largest error of the fit *without noise*, over the steps the data could be.

    Reference shapes: all ``n`` values spread evenly over one bin, for each bin in turn
    (a step at both its edges: where the smoothing errs most). The fit of the exact
    expected counts of each errs by the smoothing and the stopping rule alone; a bin's
    bound is the largest error it shows over them. Reads only the mechanism, ``bins``
    and ``n``: never the data.
    """
    fine = design.shape[1] // bins
    worst = np.zeros(bins)
    for shape in range(bins):
        truth = np.zeros(design.shape[1])
        truth[shape * fine : (shape + 1) * fine] = 1.0 / fine
        fitted = ems_histogram(n * (design @ truth), design).reshape(bins, -1).sum(axis=1)
        target = np.zeros(bins)
        target[shape] = 1.0
        worst = np.maximum(worst, np.abs(fitted - target))
    return worst


def _within(bounds: list[float | None]) -> list[float | None]:
    """An interval of a share, cut to ``[0, 1]``."""
    low, high = bounds
    return [
        None if low is None else max(low, 0.0),
        None if high is None else min(high, 1.0),
    ]

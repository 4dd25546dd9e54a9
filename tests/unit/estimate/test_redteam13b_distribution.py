"""Red team 13b: the Square Wave histogram's bias and intervals (fixed: each bin states the
smoothing's bias over steps at the bins' edges, and its interval carries it).

docs/estimating-and-auditing.md states the smoothing alone moves a bin by up
to 0.018 (measured at eps 0.5) and that the intervals leave that bias out.
A step at a bin edge (all values in the first of 5 bins) is biased without
any noise by 0.43 at eps 0.1 (n = 5000), 0.108 at eps 0.5 and 0.072 at eps 1
(n = 1e6: the smoothing, not the EM's stopping rule); at eps 0.1 the printed
intervals exclude the truth by several standard errors, and nothing is
withheld or warned (small_n only checks [0, 1]).
"""

from __future__ import annotations

import numpy as np
import pytest
from privstream.estimate.accumulators import Options
from privstream.estimate.distribution import BinTruth, SquareWaveReleases, smoothing_bias
from privstream.estimate.small_n import range_warnings
from privstream.mechanisms.square_wave import (
    SquareWaveMechanism,
    bin_law,
    ems_histogram,
    fine_bins,
)
from privstream.testing import SeededSource


@pytest.mark.parametrize(("epsilon", "n"), [(0.1, 5000), (0.5, 100_000), (1.0, 100_000)])
def test_noise_free_error_is_within_the_stated_bias(epsilon: float, n: int) -> None:
    """No noise: the counts are n times the exact law. The smoothing errs by up to 0.43 on a
    step at a bin edge (eps 0.1); each bin's stated ``bias`` bounds what the fit does on
    steps, smooth data and a point mass at a bin's centre. (A point mass within the blur of
    a bin edge is not bounded: docs, Estimating, A distribution.)"""
    mech = SquareWaveMechanism(bounds=(0.0, 100.0), epsilon=epsilon)
    design = bin_law(mech, fine_bins(5))
    bias = smoothing_bias(mech, design, 5, n)
    shapes = [
        np.linspace(0.0, 0.2, 2000),  # the first bin, evenly (a step at its edges)
        np.full(10, 0.5),  # a point mass at the centre bin's centre
        np.random.default_rng(0).beta(2.0, 5.0, 20_000),  # smooth
    ]
    for v in shapes:
        counts = n * mech.law(v).mean(axis=0).reshape(-1, 4).sum(axis=1)
        fit = ems_histogram(counts, design).reshape(5, -1).sum(axis=1)
        true = np.bincount(np.minimum((v * 5).astype(int), 4), minlength=5) / len(v)
        assert np.all(np.abs(fit - true) <= bias + 1e-3), (np.round(fit - true, 3), bias)


def test_printed_intervals_cover_or_the_histogram_is_withheld_or_warned() -> None:
    """eps 0.1, n = 5000, 5 bins, values uniform on [0, 20] (the first bin), seed 1.

    Deterministic (fixed seeds). Today bin 0 reads 0.428 [0.162, 0.695] (true
    1.0) and bin 1 reads 0.358 [0.248, 0.467] (true 0.0): 3 of 5 intervals
    miss, none by a hair, and no warning is given.
    """
    mech = SquareWaveMechanism(bounds=(0.0, 100.0), epsilon=0.1)
    values = np.random.default_rng(1).uniform(0.0, 20.0, 5000)
    acc = SquareWaveReleases("x", "real", mech, 5)
    acc.add(mech.release(values, SeededSource(1)).tolist())
    entry = acc.report(Options(bins=5, resamples=20), None)
    truth = BinTruth(mech, 5)
    truth.add([], values.tolist())
    true = truth.counts / truth.counts.sum()
    rows = entry["histogram"]["bins"]
    pairs = enumerate(zip(rows, true, strict=True))
    missed = [b for b, (r, s) in pairs if not r["ci"][0] <= s <= r["ci"][1]]
    warned = bool(range_warnings(entry)) or any(r.get("unreliable") for r in rows)
    assert not missed or warned, f"bins {missed} miss and nothing is withheld or warned"

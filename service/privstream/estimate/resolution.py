"""Whether a deconvolved histogram's bins can be shown, and how far their model may be off.

``LatticeHistogram`` reports bootstrap standard errors, which describe the
estimate's spread but not its bias, and the deconvolution is biased: its
model (a piecewise-linear density plus atoms on the bounds) smears mass that
does not fit it across neighbouring bins, and the non-negative fit at small
epsilon pulls shares towards their neighbours. Two rules follow.

**Withholding depends only on n, epsilon, the bounds and the bins**, never
on the releases, so it does not change from one release of the same
records to the next (issue 35: the earlier rule read the noisy estimate,
and at n = 100,000 which bins it withheld changed from run to run: 14
patterns in 20 releases). Every bin is withheld when the bins are finer
than n and epsilon resolve without the model: ``sqrt(2 beta^3 / n) >
RESOLUTION_LIMIT`` (0.25), with ``beta = b / w`` the noise scale in bin
widths (``b = sd / sqrt 2``). Derivation: for discrete Laplace noise
``P(Z = k) ~ a^|k|``, ``a = exp(-1/beta)``, on a lattice of bins the exact
unbiased inverse is ``P(I = k) = ((1 + a^2) P(J = k) - a P(J = k-1) - a P(J =
k+1)) / (1 - a)^2``, an average over records of ``T = [J = k] + c ([J = k] -
[J = k-1]) + c ([J = k] - [J = k+1])``, ``c = a / (1 - a)^2 ~ beta^2``. With
``P(J = j) <= (1 - a) / (1 + a) ~ 1 / (2 beta)`` its variance is about ``4 c^2
/ (2 beta) = 2 beta^3`` per record: the standard error of the only estimate
of a bin's share that assumes nothing about the distribution. Beyond 0.25
the bin shares come from the model's smoothness, not from the data. Gaussian
noise is harder to deconvolve than Laplace noise of the same spread, so for
it the test is lenient.

**The interval carries the model's bias.** Why a shown bin missed by 3.4
standard errors: data with point masses inside the range (the issue's
latencies, 60% of the values on two numbers) are outside the model, and
the fit smears each spike over the neighbouring bins; the bias check then
in use simulated only a *step* truth (each bin's share spread evenly over
it), which does not reproduce that bias. Measured at epsilon 4 on [0, 100],
n = 100,000, 10 bins, 30% of the values at 23 and 30% at 77: shown bins
covered the truth 20-45% of the time, as far as 15 standard errors. The
bias is now estimated by a parametric bootstrap at each of the truths the
estimate cannot tell apart (``REFERENCE_SHAPES``): the estimated shares
spread evenly over each bin, or put on one point of it (its start, centre
or end). ``BIAS_DRAWS`` sets of ``n`` releases are drawn from each (the
mechanism's own noise distribution) and deconvolved; a bin's ``bias`` is the
largest ``|mean estimate - shares|`` over the shapes, and its interval is
``estimate +- z sqrt(stderr^2 + bias^2)``. The same case then covers 100%
of the time (smooth data too: the interval is conservative, since the
records cannot show which shape holds). Integer bins of one value each
have an exact model: only the noise and the fit's bias at the estimate
count there.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from privstream.mechanisms.estimation import POINTS_PER_BIN, HistogramEstimate, LatticeHistogram

#: simulated release sets of the bias estimate, per reference shape
BIAS_DRAWS = 20
#: where a bin's share sits in each reference truth: None spread evenly, else a point at
#: this fraction of the bin (start, centre, end)
REFERENCE_SHAPES: tuple[float | None, ...] = (None, 0.0, 0.5, 1.0)
#: largest model-free standard error of a bin share (test 3)
RESOLUTION_LIMIT = 0.25


def model_free_stderr(histogram: LatticeHistogram, records: int) -> float:
    """``sqrt(2 beta^3 / n)``: a bin share's error without the model (module docstring, 3)."""
    width = float(np.min(histogram.ends - histogram.starts + 1))
    beta = histogram.noise.spread / np.sqrt(2.0) / width
    return float(np.sqrt(2.0 * beta**3 / max(records, 1)))


class BinCheck(NamedTuple):
    """Per bin: the bias bound, and why it is withheld ("" when it is shown)."""

    bias: NDArray[np.float64]
    problems: list[str]


def _probabilities(
    histogram: LatticeHistogram, shares: NDArray[np.float64], where: float | None
) -> NDArray[np.float64]:
    """Observation-bin probabilities when each bin's share is spread evenly over its points
    (``where`` None) or put on the point at ``where`` of the way through it."""
    boundaries = (
        histogram.obs_origin
        - 1
        + histogram.obs_width * np.arange(histogram.obs_bins + 1, dtype=np.int64)
    )
    columns = []
    for start, end in zip(histogram.starts.tolist(), histogram.ends.tolist(), strict=True):
        if where is None:
            count = min(end - start + 1, POINTS_PER_BIN)
            points = np.unique(np.linspace(start, end, count).round().astype(np.int64))
        else:
            points = np.array([round(start + where * (end - start))], dtype=np.int64)
        below = histogram.noise.cdf(boundaries[:, None] - points[None, :])
        padded = np.vstack([np.zeros((1, len(points))), below, np.ones((1, len(points)))])
        columns.append(np.diff(padded, axis=0).mean(axis=1))
    probabilities = np.clip(np.column_stack(columns) @ shares, 0.0, None)
    out: NDArray[np.float64] = probabilities / probabilities.sum()
    return out


def bias_bound(
    histogram: LatticeHistogram, estimate: HistogramEstimate, *, seed: int = 1
) -> NDArray[np.float64]:
    """The largest bias over the reference truths (module docstring), per bin."""
    shares = np.asarray(estimate.estimate, dtype=np.float64)
    n = estimate.records
    rng = np.random.Generator(np.random.PCG64(seed))
    shapes = REFERENCE_SHAPES[:1] if histogram.exact else REFERENCE_SHAPES
    worst = np.zeros(len(shares))
    for where in shapes:
        probabilities = _probabilities(histogram, shares, where)
        refits = np.array(
            [
                histogram.estimate(rng.multinomial(n, probabilities), resamples=0).estimate
                for _ in range(BIAS_DRAWS)
            ]
        )
        worst = np.maximum(worst, np.abs(refits.mean(axis=0) - shares))
    return worst


def withheld(histogram: LatticeHistogram, records: int) -> str:
    """Why every bin is withheld ("" when they are shown): n, epsilon and bins only."""
    free = model_free_stderr(histogram, records)
    if free > RESOLUTION_LIMIT and histogram.bins > 1:
        return (
            f"bins finer than the noise resolves: model-free stderr {free:.2f} > "
            f"{RESOLUTION_LIMIT} (sqrt(2 beta^3 / n), beta = noise scale / bin width)"
        )
    return ""


def check_bins(
    histogram: LatticeHistogram, estimate: HistogramEstimate, *, seed: int = 1
) -> BinCheck:
    """The bias bound of each bin of ``estimate``, and the (shared) reason to withhold."""
    reason = withheld(histogram, estimate.records)
    if reason:  # nothing is shown: the bias of numbers nobody reads is not worth its cost
        return BinCheck(np.full(histogram.bins, np.nan), [reason] * histogram.bins)
    return BinCheck(bias_bound(histogram, estimate, seed=seed), [reason] * histogram.bins)

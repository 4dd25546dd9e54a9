"""Whether a deconvolved histogram's bins can be trusted at this n and epsilon.

``LatticeHistogram`` reports bootstrap standard errors, which describe the
estimate's spread but not its bias, and the deconvolution is biased in two
ways (its docstring): the model (a piecewise-linear density) smears mass
across neighbouring bins, and the non-negative fit at small epsilon pulls
shares towards their neighbours. Both grow as bins get finer relative to the
noise. A bin is flagged *unreliable* when either holds:

1. **Noise.** Its standard error exceeds ``1 / (2 bins)``
   (``STDERR_FRACTION_OF_UNIFORM`` of the share a uniform distribution puts in
   a bin): the 95% interval (+-1.96 stderr) is then wider than +-1/bins and
   cannot tell the bin from empty nor from twice the uniform share.
2. **Bias.** Its estimated bias exceeds its standard error. The bias is
   estimated by a parametric bootstrap at the least smooth truth the estimate
   allows: the estimated shares, each spread evenly over its bin (a step
   density: the model's hardest case, a density with jumps at the bin
   edges). ``BIAS_DRAWS`` sets of ``n`` releases are drawn from it (the
   mechanism's own noise distribution), deconvolved, and the mean estimate
   minus the shares is the bias. A bias of one standard error lowers a 95%
   interval's coverage to about 83%; the Monte Carlo error of the bias
   estimate is ``stderr / sqrt(BIAS_DRAWS)``, 0.16 stderr.

3. **Resolution.** The bins are narrower than n and epsilon can resolve
   without the model: ``sqrt(2 beta^3 / n) > RESOLUTION_LIMIT`` (0.25), with
   ``beta = b / w`` the noise scale in bin widths (``b = sd / sqrt 2``, the
   Laplace scale of the noise's standard deviation). Derivation: for discrete
   Laplace noise ``P(Z = k) ~ a^|k|``, ``a = exp(-1/beta)``, on a lattice of
   bins the exact unbiased inverse is ``P(I = k) = ((1 + a^2) P(J = k) -
   a P(J = k-1) - a P(J = k+1)) / (1 - a)^2`` (``LatticeHistogram``), an average
   over records of ``T = [J = k] + c ([J = k] - [J = k-1]) + c ([J = k] -
   [J = k+1])``, ``c = a / (1 - a)^2 ~ beta^2``. With ``P(J = j) <= (1 - a) / (1 + a)
   ~ 1 / (2 beta)`` its variance is about ``4 c^2 / (2 beta) = 2 beta^3`` per
   record: the standard error of the only estimate of a bin's share that
   assumes nothing about the distribution. Beyond 0.25 (a quarter of all
   records) the bin shares come from the model's smoothness, not from the
   data, and every bin is withheld. Gaussian noise is harder to deconvolve
   than Laplace noise of the same spread, so for it the test is lenient.

The bias test is conservative: a smooth truth has a smaller bias than the
step truth, so it may flag bins an oracle would accept. Flagged bins are
not printed as estimates (the JSON report keeps them, with the reason).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from privstream.mechanisms.estimation import POINTS_PER_BIN, HistogramEstimate, LatticeHistogram

#: a bin's standard error may be at most this fraction of the uniform share 1 / bins
STDERR_FRACTION_OF_UNIFORM = 0.5
#: simulated release sets of the bias estimate
BIAS_DRAWS = 40
#: largest model-free standard error of a bin share (test 3)
RESOLUTION_LIMIT = 0.25


def model_free_stderr(histogram: LatticeHistogram, records: int) -> float:
    """``sqrt(2 beta^3 / n)``: a bin share's error without the model (module docstring, 3)."""
    width = float(np.min(histogram.ends - histogram.starts + 1))
    beta = histogram.noise.spread / np.sqrt(2.0) / width
    return float(np.sqrt(2.0 * beta**3 / max(records, 1)))


class BinCheck(NamedTuple):
    """Per bin: estimated bias, and why it is unreliable ("" when it is not)."""

    bias: NDArray[np.float64]
    problems: list[str]


def _step_probabilities(
    histogram: LatticeHistogram, shares: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Observation-bin probabilities when each bin's share is spread evenly over its points."""
    boundaries = (
        histogram.obs_origin
        - 1
        + histogram.obs_width * np.arange(histogram.obs_bins + 1, dtype=np.int64)
    )
    columns = []
    for start, end in zip(histogram.starts.tolist(), histogram.ends.tolist(), strict=True):
        count = min(end - start + 1, POINTS_PER_BIN)
        points = np.unique(np.linspace(start, end, count).round().astype(np.int64))
        below = histogram.noise.cdf(boundaries[:, None] - points[None, :])
        padded = np.vstack([np.zeros((1, len(points))), below, np.ones((1, len(points)))])
        columns.append(np.diff(padded, axis=0).mean(axis=1))
    probabilities = np.clip(np.column_stack(columns) @ shares, 0.0, None)
    out: NDArray[np.float64] = probabilities / probabilities.sum()
    return out


def check_bins(
    histogram: LatticeHistogram, estimate: HistogramEstimate, *, seed: int = 1
) -> BinCheck:
    """The bias and the reliability of each bin of ``estimate`` (see the module docstring)."""
    shares = np.asarray(estimate.estimate, dtype=np.float64)
    n = estimate.records
    rng = np.random.Generator(np.random.PCG64(seed))
    probabilities = _step_probabilities(histogram, shares)
    refits = np.array(
        [
            histogram.estimate(rng.multinomial(n, probabilities), resamples=0).estimate
            for _ in range(BIAS_DRAWS)
        ]
    )
    bias: NDArray[np.float64] = refits.mean(axis=0) - shares
    limit = STDERR_FRACTION_OF_UNIFORM / histogram.bins
    free = model_free_stderr(histogram, n)
    problems = []
    for stderr, off in zip(estimate.stderr.tolist(), bias.tolist(), strict=True):
        if free > RESOLUTION_LIMIT and histogram.bins > 1:
            problems.append(
                f"bins finer than the noise resolves: model-free stderr {free:.2f} > "
                f"{RESOLUTION_LIMIT} (sqrt(2 beta^3 / n), beta = noise scale / bin width)"
            )
        elif not np.isfinite(stderr) or stderr > limit:
            problems.append(f"stderr {stderr:.3f} > {limit:.3f} (1/(2 bins))")
        elif abs(off) > stderr and histogram.bins > 1:
            problems.append(f"bias {off:+.3f} beyond stderr {stderr:.3f}")
        else:
            problems.append("")
    return BinCheck(bias, problems)

"""The discrete Gaussian on the integers: a fixed-budget sampler and its privacy profile.

``N_Z(0, sigma^2)``, ``p(z) = exp(-z^2 / (2 sigma^2)) / N`` on the integers: the
noise of every Gaussian mechanism, added to a grid index so no continuous
noise meets a raw value. The ideal profile, zCDP conversion and sigma
calibration are in ``discrete_gaussian_profile``; the exact table in
``discrete_gaussian_table``.

Claim: ``DiscreteGaussianSampler.delta(eps, Delta)`` is never below the
hockey-stick divergence of the *implemented* pmf ``q`` at any integer shift
``|s| <= Delta`` (``q`` symmetric and log-concave on its support, float
rounding covered by ``rounding_margin``); ``vector_delta`` bounds ``k``
independent draws at L2 shift ``Delta2`` through zCDP and ratio bounds
``a_lo <= q/p <= a_hi``.

Calibration: ``calibrated_sampler`` keeps the sampler at the calibrated sigma
if its own exact profile meets delta, else takes a slightly wider one.

Sampler contract: two 64-bit words per value, ``u = w0 2^64 + w1`` uniform on
``[0, 2^128)``, ``Z = -T + #{j : C_j <= u}`` over integer thresholds, so
``q(z) = W(z) / 2^128`` exactly; ``W(0)`` makes the weights sum to ``2^128``.

Proof, step by step, with the function each step proves:
docs/proofs/discrete-gaussian.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Final

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.discrete_gaussian_profile import (
    MAX_EXACT_SIGMA,
    TAIL_SIGMAS,
    WINDOW_SIGMAS,
    calibrate_discrete_gaussian,
    check_sigma,
    concentrated_delta,
    discrete_gaussian_delta,
    gauss_tail_sum,
    rounding_margin,
    smallest_sigma,
)
from privstream.mechanisms.discrete_gaussian_table import ONE, RESOLUTION_BITS, build_table
from privstream.mechanisms.rng import Words

__all__ = [
    "GUIDE_BITS",
    "MAX_EXACT_SIGMA",
    "MAX_TABLE_SIGMA",
    "PMF_RELATIVE_ERROR",
    "RESOLUTION_BITS",
    "WINDOW_SIGMAS",
    "WORDS_PER_SAMPLE",
    "DiscreteGaussianSampler",
    "calibrate_discrete_gaussian",
    "calibrated_sampler",
    "concentrated_delta",
    "discrete_gaussian_delta",
    "sampler_for",
    "smallest_sigma",
    "vector_bound",
]

#: words drawn per sample: one 128-bit uniform
WORDS_PER_SAMPLE: Final = 2
#: tables are built up to this sigma (about 24 sigma entries, 16 bytes each)
MAX_TABLE_SIGMA: Final = 2.0**15
#: ``sample`` looks a value up in a guide table over the top bits of its first word
GUIDE_BITS: Final = 16
#: a-priori bound on the relative error of the double-precision pmf
PMF_RELATIVE_ERROR: Final = 2.0**-40


class DiscreteGaussianSampler:
    """``N_Z(0, sigma^2)`` by table inversion of one 128-bit uniform (two words) per value."""

    words_per_sample: Final = WORDS_PER_SAMPLE

    def __init__(self, sigma: float) -> None:
        s = check_sigma(sigma)
        if s > MAX_TABLE_SIGMA:
            raise MechanismError(
                f"sigma {s:.6g} needs a table of more than {24 * MAX_TABLE_SIGMA:.0f} entries; "
                "use a coarser grid"
            )
        self.sigma = s
        start = math.ceil(TAIL_SIGMAS * s) + 1
        z = np.arange(start + 1, dtype=np.float64)
        unnormalised = np.exp(-(z * z) / (2.0 * s * s))
        normaliser = float(unnormalised[0]) + 2.0 * math.fsum(unnormalised[1:].tolist())
        #: ``p_f(z)`` for ``z = 0..T0``: the double-precision pmf the table is built from
        self.reference_pmf: NDArray[np.float64] = unnormalised / normaliser
        table = build_table(self.reference_pmf, sigma=s)
        self.support = support = table.support
        #: the cdf thresholds ``C_j`` as 16-byte big-endian strings (byte order = numeric order)
        self._thresholds = table.thresholds
        #: the high 64 bits of each threshold, and one padding entry (``sample``)
        high = self._thresholds.view(">u8")[0::2].astype(np.uint64)
        self._high = np.append(high, np.uint64(0))
        #: guide[b]: the first threshold whose high word is at least b 2^(64 - GUIDE_BITS)
        starts = np.arange(2**GUIDE_BITS + 1, dtype=np.uint64)
        starts[:-1] <<= np.uint64(64 - GUIDE_BITS)
        self._guide = np.searchsorted(high, starts, side="left").astype(np.intp)
        self._guide[-1] = len(high)
        self.values = np.arange(-support, support + 1, dtype=np.int64)
        #: the exact pmf of the sampler, rounded to doubles (relative error 2^-53)
        self.pmf = table.pmf
        self._log_pmf = np.log(self.pmf)
        self.variance = float(np.sum(self.pmf * self.values.astype(np.float64) ** 2))
        self._vector_constants(normaliser)

    def _vector_constants(self, normaliser: float) -> None:
        """Ratio bounds ``a_lo <= q/p <= a_hi`` and the core for :meth:`vector_delta`."""
        s, r, support = self.sigma, PMF_RELATIVE_ERROR, self.support
        unit = 2.0**-RESOLUTION_BITS
        # core: p_f >= 2^-128 / r, so that floor() costs at most a relative r there
        in_core = self.reference_pmf[: support + 1] >= unit / r * (1.0 + r)
        core = int(np.max(np.nonzero(in_core)[0]))
        normal = normaliser * (1.0 - r)  # N_true >= this (the table covers |z| <= T0)
        tail_support = 2.0 * gauss_tail_sum(float(support), s) / normal
        p0_low = (1.0 - 2.0 * r) / normaliser
        e0 = (r + tail_support + 2.0 * support * unit) / p0_low
        self._ratio_hi = 1.0 + max(r, e0)
        self._ratio_lo = 1.0 - max(3.0 * r, e0)
        self._core = core
        self._core_tail = 2.0 * gauss_tail_sum(float(core), s) / normal

    def sample(self, words: Words) -> NDArray[np.int64]:
        """Map ``(..., 2)`` words to integers: ``Z = -T + #{j : C_j <= w0 2^64 + w1}``."""
        if words.shape[-1] != WORDS_PER_SAMPLE:
            raise ValueError(f"need {WORDS_PER_SAMPLE} words per sample, got {words.shape[-1]}")
        # Exact, by a guide table over the top GUIDE_BITS of w0: thresholds before
        # guide[b] have a high word below b 2^48 <= w0 (counted), from guide[b + 1] on
        # above w0 (not counted); a bucket holding one threshold compares its high word.
        # Rows left undecided (a bucket with several thresholds, in the far tails, or a
        # high word equal to w0) take the full 128-bit search.
        high = np.ascontiguousarray(words[..., 0], dtype=np.uint64)
        bucket = (high >> np.uint64(64 - GUIDE_BITS)).astype(np.intp)
        first, after = self._guide[bucket], self._guide[bucket + 1]
        probe = self._high[first]  # padded: defined for first == len(thresholds)
        single = after - first == 1
        above = first + (single & (probe < high))
        undecided = (after - first > 1) | (single & (probe == high))
        if undecided.any():
            big_endian = np.ascontiguousarray(words[undecided], dtype=">u8")
            keys = big_endian.view("S16")[..., 0]
            above[undecided] = np.searchsorted(self._thresholds, keys, side="right")
        values: NDArray[np.int64] = above.astype(np.int64) - self.support
        return values

    def mean_abs(self, offset: float = 0.0) -> float:
        """``E|Z + offset|`` under the sampler's exact pmf."""
        return float(np.sum(self.pmf * np.abs(self.values.astype(np.float64) + offset)))

    def delta(self, epsilon: float, sensitivity: int) -> float:
        """Exact ``delta(eps)`` of *this sampler* for every integer shift ``|s| <= sensitivity``."""
        shift = int(sensitivity)
        if shift <= 0:
            return 0.0
        size = len(self.pmf)
        if shift >= size:
            return 1.0  # disjoint supports
        log_other = np.full(size, -np.inf)
        log_other[shift:] = self._log_pmf[: size - shift]  # ln q(z - shift)
        exponent = epsilon + log_other - self._log_pmf  # eps - loss
        terms = self.pmf * -np.expm1(np.minimum(exponent, 0.0))
        near = exponent < 2.0**-30
        mass = float(np.sum(self.pmf[near]))
        total = math.fsum(terms.tolist()) + mass * rounding_margin(epsilon)
        return min(1.0, total)

    def correction_constants(self) -> tuple[float, float, float]:
        """``(ln a_hi, ln a_lo, P_p(|Z| > T_c))`` of this table, for :func:`vector_bound`."""
        return (
            math.log1p(self._ratio_hi - 1.0),
            math.log1p(self._ratio_lo - 1.0),
            self._core_tail,
        )

    def vector_delta(self, epsilon: float, l2_sensitivity: float, dimension: int) -> float:
        """``delta(eps)`` bound for ``dimension`` independent draws and every integer shift
        vector of L2 norm at most ``l2_sensitivity`` (see the proof page)."""
        log_hi, log_lo, tail = self.correction_constants()
        return vector_bound(epsilon, l2_sensitivity, dimension, self.sigma, log_hi, log_lo, tail)

    def weights(self) -> tuple[int, ...]:
        """The exact integer weights ``W(z)`` for ``z = -T..T`` (they sum to ``2^128``),
        decoded from the thresholds the sampler searches."""
        raw = self._thresholds.tobytes()  # item access would strip trailing NUL bytes
        cdf = [int.from_bytes(raw[i : i + 16], "big") for i in range(0, len(raw), 16)]
        cdf.append(ONE)
        return tuple(b - a for a, b in zip([0, *cdf[:-1]], cdf, strict=True))


def vector_bound(
    epsilon: float,
    l2_sensitivity: float,
    dimension: int,
    sigma: float,
    log_ratio_hi: float,
    log_ratio_lo: float,
    core_tail: float,
) -> float:
    """``a_hi^k [concentrated_delta(rho, eps') + e^eps' k P_p(|Z| > T_c)]`` (proof page),
    ``rho = Delta2^2 / (2 sigma^2)``, ``eps' = eps - k ln(a_hi / a_lo)``."""
    k = int(dimension)
    if k < 1:
        raise MechanismError(f"dimension {dimension!r} must be >= 1")
    if l2_sensitivity <= 0.0:
        return 0.0
    eps_eff = epsilon - k * (log_ratio_hi - log_ratio_lo)
    if eps_eff <= 0.0:
        return 1.0
    base = concentrated_delta(l2_sensitivity**2 / (2.0 * sigma * sigma), eps_eff)
    outside = 0.0
    if core_tail > 0.0:
        outside = math.exp(min(math.log(k * core_tail) + eps_eff, 0.0))
    return min(1.0, math.exp(k * log_ratio_hi) * (base + outside) * (1.0 + 2.0**-36))


@lru_cache(maxsize=16)
def sampler_for(sigma: float) -> DiscreteGaussianSampler:
    """A cached sampler (tables are immutable and take tens of milliseconds to build)."""
    return DiscreteGaussianSampler(sigma)


def calibrated_sampler(
    epsilon: float,
    delta: float,
    profile: Callable[[DiscreteGaussianSampler], float],
    start: float,
) -> DiscreteGaussianSampler:
    """The sampler at ``start``, or a slightly wider one if its exact ``profile`` exceeds delta.

    ``start`` comes from a bisection on the ideal profile; the implemented
    table differs from the ideal pmf by ~1e-13 relative, so one check normally
    passes. Otherwise (very large epsilon, where the table's tail cut binds)
    sigma grows by factors ``1 + 1e-9 * 4^j`` until the exact profile passes,
    and a short bisection between the last failing and the first passing
    sigma takes back most of the overshoot. Every returned table has been
    checked exactly.
    """
    failed = start
    for attempt in range(16):
        sigma = start * (1.0 + 1e-9 * 4.0**attempt) if attempt else start
        sampler = sampler_for(sigma)
        if profile(sampler) <= delta:
            for _ in range(8 if attempt >= 4 else 0):
                mid = 0.5 * (failed + sampler.sigma)
                candidate = DiscreteGaussianSampler(mid)
                if profile(candidate) <= delta:
                    sampler = candidate
                else:
                    failed = mid
            return sampler
        failed = sigma
    raise MechanismError(
        f"the discrete Gaussian sampler cannot reach delta {delta:.3g} at epsilon {epsilon:.6g}"
        " (delta too small or epsilon too large for its 2^-128 table); "
        "raise delta or use the laplace mechanism"
    )

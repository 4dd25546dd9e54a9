"""Randomized response on a finite domain ``D`` with ``|D| = m + 1``.

Claim: ``(epsilon, delta)``-DP for any two values, for the law actually sampled.

Release: keep the true value with probability ``1 - m p``; otherwise output
one of the ``m`` other values uniformly (probability ``p`` each).

Calibration (Jazbec 2018, Ex. 4.10): (eps, delta)-DP iff
``p >= (1 - delta) / (m + e^eps)``; equality, the least noise, computed as
``p = (1 - delta) e^-eps / (1 + m e^-eps)``. On words: ``T`` is the least
integer with ``T / 2^64 >= (1 - delta) / (1 + E pi_min)`` (``E <= e^eps``
rational), and construction checks the realised divergence (``realised_delta``)
for the threshold actually sampled; epsilons below ``2^-50`` are refused.

Sampler contract: two 64-bit words per value, one ``words`` call: flip iff
``w0 < T``, the flipped answer ``w1 mod m`` shifted past the true one;
``release`` rebuilds ``T`` from the reported ``p`` (``>=`` the calibrated one).

Error ``m p``, equal to the lower bound ``(1 - delta) m / (m + e^eps)``
(Thm. 5.5, Ex. 5.7); ``estimate_frequencies`` debiases the shares.

Proof, step by step, with the function each step proves:
docs/proofs/randomized-response.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.base import TWO_64, FiniteMechanism, exp_lower_bound, finite_gamma
from privstream.mechanisms.rng import NoiseSource
from privstream.mechanisms.validation import check_delta, check_domain, check_epsilon

DomainValue = str | int | bool


#: below this, rounding a flip threshold to 2^-64 can exceed the declared delta
SMALLEST_EPSILON = 2.0**-50


def pick_probabilities(m: int) -> tuple[Fraction, Fraction]:
    """``(pi_min, pi_max)`` of ``w mod m`` for a uniform 64-bit word ``w``."""
    low = Fraction(TWO_64 // m, TWO_64)
    return low, low if TWO_64 % m == 0 else low + Fraction(1, TWO_64)


def realised_delta(threshold: int, m: int, epsilon: float) -> Fraction:
    """Upper bound on the hockey-stick divergence of flip threshold ``T`` (proof page)."""
    flip = Fraction(threshold, TWO_64)
    low, high = pick_probabilities(m)
    e = exp_lower_bound(epsilon)
    terms = (
        1 - flip - e * flip * low,
        flip * high - e * (1 - flip),
        (m - 1) * flip * (high - e * low),
    )
    return sum((term for term in terms if term > 0), Fraction(0))


def flip_threshold(m: int, epsilon: float, delta: float) -> int:
    """The least ``T`` with ``T / 2^64 >= (1 - delta) / (1 + E pi_min)``, at least 1."""
    low, _ = pick_probabilities(m)
    e = exp_lower_bound(epsilon)
    need = (1 - Fraction(delta)) / (1 + e * low)
    return max(1, math.ceil(need * TWO_64))


@functools.lru_cache(maxsize=256)
def threshold_of(p: float, m: int) -> int:
    """``T = ceil(m p 2^64)``: the flip threshold a reported ``p`` stands for.

    Cached: exact ``Fraction`` arithmetic (3.6 us), asked by every release of a column.
    """
    return min(max(1, math.ceil(Fraction(p) * m * TWO_64)), TWO_64 - 1)


def reported_p(threshold: int, m: int) -> float:
    """``T / (m 2^64)`` rounded up to a double, so ``threshold_of`` gives back ``>= T``."""
    exact = Fraction(threshold, m * TWO_64)
    p = float(exact)
    return p if Fraction(p) >= exact else math.nextafter(p, math.inf)


class RandomizedResponse(FiniteMechanism):
    """k-ary randomized response over an explicit domain (indices in, indices out)."""

    name: ClassVar[str] = "randomized_response"
    metric: ClassVar[str] = "discrete (0 if equal, 1 otherwise)"

    def __init__(
        self, *, domain: Sequence[DomainValue], epsilon: float, delta: float = 0.0
    ) -> None:
        super().__init__(epsilon=check_epsilon(epsilon), delta=check_delta(delta))
        self.domain: tuple[DomainValue, ...] = check_domain(domain)
        self.m = len(self.domain) - 1
        self.p = reported_p(flip_threshold(self.m, self.epsilon, self.delta), self.m)
        #: a double: 1.0 once ``m p < 2^-53``, while the sampler still flips with ``m p``
        self.keep_probability = 1.0 - self.m * self.p
        sampled = threshold_of(self.p, self.m)
        if self.epsilon < SMALLEST_EPSILON or realised_delta(
            sampled, self.m, self.epsilon
        ) > Fraction(self.delta):
            raise MechanismError(
                f"epsilon {self.epsilon:.3g} is too small for 64-bit flip thresholds "
                f"(use at least {SMALLEST_EPSILON:.3g})"
            )

    @property
    def expected_error(self) -> float:
        return self.m * self.p

    @property
    def gamma_lower_bound(self) -> float:
        return finite_gamma(self.m, self.epsilon, self.delta)

    def frequency_variance(self, n: int, frequency: float) -> float:
        """Var of the debiased frequency ``(c/n - p) / (1 - (m+1) p)`` of one value.

        Given the data, each record reports the value independently: with
        probability ``1 - m p`` if it holds the value (a share ``f``), else
        ``p``. The count's variance is the sum of those Bernoulli variances.
        """
        keep, p = self.keep_probability, self.p
        spread = frequency * keep * (1 - keep) + (1 - frequency) * p * (1 - p)
        return spread / (n * (1.0 - (self.m + 1) * p) ** 2)

    def estimator_variance(self, n: int) -> float:
        # linear in f: the worst case is at f = 0 or f = 1
        return max(self.frequency_variance(n, 0.0), self.frequency_variance(n, 1.0))

    def params(self) -> dict[str, float | int | str]:
        return {"p": self.p, "keep_probability": self.keep_probability, "domain_size": self.m + 1}

    def release(self, indices: NDArray[np.int64], source: NoiseSource) -> NDArray[np.int64]:
        """Sanitize a column of domain indices (``0..m``)."""
        indices = np.asarray(indices)
        if len(indices) and (
            indices.dtype.kind not in "iu" or indices.min() < 0 or indices.max() > self.m
        ):
            raise MechanismError(
                f"{self.name}: expected domain indices in 0..{self.m}, got {indices.dtype} values"
            )
        words = source.words(len(indices), 2)
        flip = words[:, 0] < np.uint64(threshold_of(self.p, self.m))
        other = (words[:, 1] % np.uint64(self.m)).astype(np.int64)
        other += other >= indices  # skip over the true value
        return np.where(flip, other, indices)

    def noise_error(
        self, inputs: NDArray[np.int64], outputs: NDArray[np.int64]
    ) -> NDArray[np.float64]:
        """The discrete metric ``1[y != d]``: whether the answer was flipped."""
        flipped: NDArray[np.float64] = (np.asarray(outputs) != np.asarray(inputs)).astype(
            np.float64
        )
        return flipped


def estimate_frequencies(
    counts: Sequence[int] | NDArray[np.int64], epsilon: float, delta: float = 0.0
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Debiased share of records holding each domain value, and its standard error.

    ``counts[i]`` is how many of the ``n = sum(counts)`` released values were
    ``domain[i]`` (all ``m + 1`` values, in the mechanism's order), released
    at ``(epsilon, delta)``. A record holding the value reports it with
    probability ``1 - m p``, any other record with probability ``p``, so
    ``E[c/n] = f (1 - m p) + (1 - f) p = p + f (1 - (m+1) p)`` and::

        f_hat = (c/n - p) / (1 - (m+1) p)

    is unbiased (thesis Example 4.10's mechanism; the denominator is positive
    because ``p < 1/(m+1)``). The standard error is ``frequency_variance``'s
    exact variance given the data, evaluated at ``f_hat`` clipped to [0, 1];
    estimates are not clipped (clipping would bias them), so they may fall
    slightly outside [0, 1] and always sum to 1. The estimates of different
    values are negatively correlated (one record, one answer); each interval
    is for one value.
    """
    arr = np.asarray(counts, dtype=np.float64)
    if arr.ndim != 1 or len(arr) < 2:
        raise MechanismError(f"expected one count per domain value (at least 2), got {arr.shape}")
    if np.any(arr < 0) or not np.all(np.isfinite(arr)):
        raise MechanismError("counts must be finite and non-negative")
    n = float(arr.sum())
    if n <= 0:
        raise MechanismError("no reports to estimate from")
    mechanism = RandomizedResponse(domain=list(range(len(arr))), epsilon=epsilon, delta=delta)
    p, keep = mechanism.p, mechanism.keep_probability
    scale = keep - p  # 1 - (m+1) p
    estimates: NDArray[np.float64] = (arr / n - p) / scale
    f = np.clip(estimates, 0.0, 1.0)
    spread = f * keep * (1.0 - keep) + (1.0 - f) * p * (1.0 - p)
    stderr: NDArray[np.float64] = np.sqrt(spread / n) / scale
    return estimates, stderr

r"""Randomized response on a finite domain ``D`` with ``|D| = m + 1``.

Keep the true value with probability ``1 - m p``; otherwise output one of
the ``m`` other values uniformly, so each other value has probability ``p``.

Calibration (Jazbec 2018, Example 4.10): the mechanism is (eps, delta)-DP
iff ``p >= (1 - delta) / (m + e^eps)``; we use equality, the least noise.
Why: for neighbours ``d != d'`` and an output set ``A``, the only binding
case is ``d in A, d' not in A``; the worst such ``A`` is ``{d}``, where
``1 - m p <= e^eps p + delta`` rearranges to the bound. Any other value in
``A`` adds ``p`` to both sides (``e^eps p`` on the right), so only loosens it.
Since ``delta < 1`` and ``eps > 0``, ``p < 1/(m+1) < 1 - m p``: the true
value stays the most likely output. Computed as
``p = (1 - delta) e^-eps / (1 + m e^-eps)`` to avoid overflow at large eps.

Error in the discrete metric (``rho = 1`` when the output differs):
``E[rho] = m p`` for every input. Lower bound (Theorem 5.5, ``kappa = 1``):
``gamma >= (1 - delta) m / (m + e^eps)``, which equals ``m p``: randomized
response with the smallest ``p`` is optimal (Example 5.7). Boolean fields
are ``m = 1``; at ``delta = 0, eps = ln 3`` that is the fair-coin protocol.

Sampling: one uniform decides keep/flip; a second picks among the ``m``
other values (index ``j`` in ``0..m-1``, shifted past the true index).

Analyst side (``estimate_frequencies``). With ``c`` the number of released
values equal to ``v`` among ``n`` and ``f`` the share of records holding
``v``, ``E[c/n] = p + f (1 - (m+1) p)``, so ``f_hat = (c/n - p) / (1 - (m+1) p)``
is unbiased, with the variance given the data of ``frequency_variance``.
The map from ``c`` to ``f_hat`` is the same increasing function for every
value: debiasing corrects the frequencies (raw shares are pulled towards
``1/(m+1)``), never the ranking of the counts.

References
----------
* M. Jazbec, *Splošna definicija diferencirane zasebnosti*, 2018, Ex. 4.10,
  Thm. 5.5, Ex. 5.7.
* S. Warner, *Randomized response*, JASA 60(309), 1965.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from service.errors import MechanismError
from service.mechanisms.base import Mechanism, exp_neg, finite_gamma
from service.mechanisms.rng import NoiseSource, uniforms
from service.mechanisms.validation import check_delta, check_domain, check_epsilon

DomainValue = str | int | bool


class RandomizedResponse(Mechanism):
    """k-ary randomized response over an explicit domain (indices in, indices out)."""

    name: ClassVar[str] = "randomized_response"
    metric: ClassVar[str] = "discrete (0 if equal, 1 otherwise)"

    def __init__(
        self, *, domain: Sequence[DomainValue], epsilon: float, delta: float = 0.0
    ) -> None:
        super().__init__(epsilon=check_epsilon(epsilon), delta=check_delta(delta))
        self.domain: tuple[DomainValue, ...] = check_domain(domain)
        self.m = len(self.domain) - 1
        e = exp_neg(self.epsilon)
        self.p = (1.0 - self.delta) * e / (1.0 + self.m * e)
        self.keep_probability = 1.0 - self.m * self.p

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
        u = uniforms(source, len(indices), 2)
        flip = u[:, 0] >= self.keep_probability
        other = np.floor(u[:, 1] * self.m).astype(np.int64)
        other = np.minimum(other, self.m - 1)  # u*m < m always; guard float rounding
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

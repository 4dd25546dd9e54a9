"""The exponential mechanism on an ordered finite domain (McSherry and Talwar, 2007).

Claim: pure local ``eps``-DP (``delta = 0``) for any two values, for the law
actually sampled.

Release: positions ``0..m`` in the declared order, utility ``-|i - j|``, so
``P(j | i) = q^|i-j| / Z_i`` with ``q = e^-lambda``: a wrong answer is most
likely a near one.

Calibration: sensitivity ``m``; the largest ``lambda`` in ``[eps/(2m), eps/m]``
whose privacy loss ``max_j ln(max_i P(j|i) / min_i P(j|i))`` is within ``eps``
(the textbook ``eps/(2m)`` is a valid lower end).

Sampler contract: one 64-bit word per value; row ``i`` holds integer counts
``c_i(j) >= 1`` summing to ``2^64``, so the realised law is ``c_i(j) / 2^64``
exactly, and construction checks ``max_i c_i(j) <= E min_i c_i(j)``
(``E <= e^eps`` rational) for the very counts it samples with, or refuses.

Error ``max_i sum_j P(j|i) |i - j|``; lower bound ``(1 - delta) m / (m + e^eps)``
(Thm. 5.5); ``estimate_frequencies`` inverts the realised transition matrix.

Proof, step by step, with the function each step proves, and the comparison
with randomized response: docs/proofs/exponential.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from itertools import accumulate
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.base import TWO_64, FiniteMechanism, exp_lower_bound, finite_gamma
from privstream.mechanisms.rng import NoiseSource
from privstream.mechanisms.validation import check_domain, check_epsilon

#: the largest ordinal domain (the checks and the estimator are O(k^2) and O(k^3))
MAX_VALUES = 256
#: relative reductions of the target epsilon tried when rounding to 2^-64 breaks the bound
_MARGINS = (2.0**-40, 2.0**-30, 2.0**-20, 2.0**-12, 2.0**-8)
_BISECTIONS = 80


def _log_law(lam: float, k: int) -> NDArray[np.float64]:
    """``ln P(j | i)`` for every ``(i, j)``: ``-lam |i-j| - ln Z_i``."""
    distance = np.abs(np.subtract.outer(np.arange(k), np.arange(k))).astype(np.float64)
    logits = -lam * distance
    top = logits.max(axis=1, keepdims=True)
    log_z = top + np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    law: NDArray[np.float64] = logits - log_z
    return law


def privacy_loss(lam: float, k: int) -> float:
    """``max_j ln(max_i P(j|i) / min_i P(j|i))`` of the ideal law."""
    law = _log_law(lam, k)
    return float(np.max(law.max(axis=0) - law.min(axis=0)))


def calibrate(epsilon: float, k: int) -> float:
    """The largest ``lambda`` in ``[eps/(2m), eps/m]`` with ``privacy_loss <= epsilon``."""
    m = k - 1
    lo, hi = epsilon / (2 * m), epsilon / m
    for _ in range(_BISECTIONS):
        mid = 0.5 * (lo + hi)
        if privacy_loss(mid, k) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo


def word_counts(lam: float, k: int) -> list[list[int]]:
    """``c_i(j)``: ``floor(2^64 P(j|i))``, at least 1, the rest on ``j = i``; rows sum to 2^64."""
    law = np.exp(_log_law(lam, k))
    rows: list[list[int]] = []
    for i in range(k):
        row = [max(1, int(p * TWO_64)) for p in law[i].tolist()]
        row[i] += TWO_64 - sum(row)
        rows.append(row)
    return rows


def is_private(counts: list[list[int]], epsilon: float) -> bool:
    """For every answer ``j``: ``max_i c_i(j) <= E min_i c_i(j)``, ``E <= e^eps`` rational."""
    bound = exp_lower_bound(epsilon)
    for column in zip(*counts, strict=True):
        if min(column) < 1 or Fraction(max(column)) > bound * min(column):
            return False
    return True


def thresholds(counts: list[list[int]]) -> NDArray[np.uint64]:
    """``C_i(j)`` for ``j = 0..m-1``: each row's running sums, the total ``2^64`` dropped.

    Summed as Python integers: numpy would first convert a row holding counts on
    both sides of ``2^63`` to float64 and round the sums by up to 2^11 words (a
    law other than the one ``is_private`` checked: k = 5 at epsilon 36.25 realised
    36.74, and from epsilon ~38 the array overflowed). Rows sum to ``2^64`` and
    ``is_private`` holds every count to at least 1, so every sum is below ``2^64`` and
    the ``uint64`` array holds them exactly.
    """
    sums = [list(accumulate(row[:-1])) for row in counts]
    return np.array(sums, dtype=np.uint64).reshape(len(counts), len(counts) - 1)


class OrdinalExponential(FiniteMechanism):
    """The exponential mechanism with utility ``-|i - j|`` on an ordered domain."""

    name: ClassVar[str] = "exponential"
    metric: ClassVar[str] = "positions apart in the declared order (|y - d|)"

    def __init__(self, *, domain: Sequence[Any], epsilon: float) -> None:
        super().__init__(epsilon=check_epsilon(epsilon), delta=0.0)
        self.domain = check_domain(domain)
        k = len(self.domain)
        if k > MAX_VALUES:
            raise MechanismError(
                f"exponential: {k} values, at most {MAX_VALUES}; use randomized_response "
                "or local_hashing for larger domains"
            )
        self.m = k - 1
        for margin in _MARGINS:
            lam = calibrate(self.epsilon * (1.0 - margin), k)
            counts = word_counts(lam, k)
            if is_private(counts, self.epsilon):
                break
        else:
            raise MechanismError(
                f"exponential: epsilon {self.epsilon:g} is too large for 64-bit words on "
                f"{k} values (an answer would have probability below 2^-64); use a smaller "
                "epsilon"
            )
        self.lam = lam
        self._counts = counts
        #: ``C_i(j)`` for ``j = 0..m-1`` (every one below 2^64): the sampling thresholds
        self._thresholds = thresholds(counts)
        #: the realised law ``c_i(j) / 2^64`` as doubles
        self.law = np.array([[c / TWO_64 for c in row] for row in counts], dtype=np.float64)

    @property
    def expected_error(self) -> float:
        distance = np.abs(np.subtract.outer(np.arange(self.m + 1), np.arange(self.m + 1)))
        return float(np.max((self.law * distance).sum(axis=1)))

    @property
    def gamma_lower_bound(self) -> float:
        return finite_gamma(self.m, self.epsilon, self.delta)

    def frequency_variances(self) -> NDArray[np.float64]:
        """``V[v, i]``: ``n Var(f_hat_v)`` when every record holds ``i`` (proof page)."""
        inverse = np.linalg.inv(self.law.T)
        variances: NDArray[np.float64] = (inverse**2) @ self.law.T - np.eye(self.m + 1)
        return variances

    def estimator_variance(self, n: int) -> float:
        # linear in the data's shares f: the worst case is a point mass
        return float(np.max(self.frequency_variances())) / n

    def params(self) -> dict[str, float | int | str]:
        return {"lambda": self.lam, "domain_size": self.m + 1}

    def release(self, indices: NDArray[np.int64], source: NoiseSource) -> NDArray[np.int64]:
        """Sanitize a column of domain positions (``0..m``): one word per value."""
        indices = np.asarray(indices)
        if len(indices) and (
            indices.dtype.kind not in "iu" or indices.min() < 0 or indices.max() > self.m
        ):
            raise MechanismError(
                f"{self.name}: expected domain positions in 0..{self.m}, got {indices.dtype} values"
            )
        words = source.words(len(indices), 1)[:, 0]
        out = np.empty(len(indices), dtype=np.int64)
        for i in np.unique(indices).tolist():
            rows = indices == i
            out[rows] = np.searchsorted(self._thresholds[i], words[rows], side="right")
        return out

    def noise_error(
        self, inputs: NDArray[np.int64], outputs: NDArray[np.int64]
    ) -> NDArray[np.float64]:
        """``|y - d|`` in positions."""
        error: NDArray[np.float64] = np.abs(
            np.asarray(outputs, dtype=np.int64) - np.asarray(inputs, dtype=np.int64)
        ).astype(np.float64)
        return error


def estimate_frequencies(
    mechanism: OrdinalExponential, counts: Sequence[int] | NDArray[np.int64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Debiased share of records holding each value, and its standard error (proof page)."""
    arr = np.asarray(counts, dtype=np.float64)
    if arr.shape != (mechanism.m + 1,) or np.any(arr < 0):
        raise MechanismError(f"expected {mechanism.m + 1} non-negative counts, got {arr.shape}")
    n = float(arr.sum())
    if n <= 0:
        raise MechanismError("no reports to estimate from")
    estimates: NDArray[np.float64] = np.asarray(
        np.linalg.solve(mechanism.law.T, arr / n), dtype=np.float64
    )
    shares = np.clip(estimates, 0.0, None)
    total = float(shares.sum())
    # the variance given the data, at the estimate made a distribution (uniform if all <= 0)
    f = shares / total if total > 0 else np.full(len(shares), 1.0 / len(shares))
    variance = mechanism.frequency_variances() @ f / n
    stderr: NDArray[np.float64] = np.sqrt(np.clip(variance, 0.0, None))
    return estimates, stderr

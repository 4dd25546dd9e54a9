r"""The statistics of the audit: Clopper-Pearson bounds and an epsilon lower bound.

Setting. A mechanism ``M`` claims (eps, delta)-DP: for neighbouring inputs
``x, x'`` and every measurable set ``S`` of outputs::

    p = P[M(x) in S] <= e^eps q + delta,    q = P[M(x') in S]          (1)

(and the same with ``x, x'`` swapped). The audit draws ``n`` independent
outputs from each input through the real pipeline, counts ``K_x(S)``, the
draws of input ``x`` that land in ``S``, for every ``S`` of a finite family
``F`` of test sets, and bounds the probabilities from the counts.

Clopper-Pearson, one-sided (exact for the binomial, conservative):

* lower bound ``L(k) = Beta^-1(beta; k, n - k + 1)`` (``0`` for ``k = 0``):
  ``P_p[L(K) > p] <= beta`` for every ``p``;
* upper bound ``U(k) = Beta^-1(1 - beta; k + 1, n - k)`` (``1`` for ``k = n``):
  ``P_p[U(K) < p] <= beta`` for every ``p``.

Epsilon lower bound of one test set and one ordered pair of inputs::

    eps_lb(S; x, x') = ln((L(K_x(S)) - delta) / U(K_x'(S)))               (2)

(``-inf`` when ``L <= delta``: the set says nothing). The audit reports
``eps_lb = max`` of (2) over ``S in F`` and over the ordered neighbour pairs,
and **fails when eps_lb > eps**.

Why a correct mechanism fails with probability at most ``alpha``. Let ``I``
be the audited inputs. The audit uses ``2 |I| |F|`` one-sided intervals (a
lower and an upper one per input and set), each at level ``beta = alpha /
(2 |I| |F|)`` (Bonferroni). With probability ``>= 1 - alpha`` all of them
cover at once; on that event, for every pair and every set, (1) gives
``L - delta <= p - delta <= e^eps q <= e^eps U``, i.e. (2) ``<= eps``. The
union bound needs no independence between the sets or between the inputs'
samples; it needs the family ``F`` to be fixed before the counted draws are
seen, which is why thresholds come from a separate *pilot* sample
(``privstream.audit.events``), and it needs the draws of one input to be
independent (fresh CSPRNG words, or distinct memo tokens for memoized fields).
``alpha`` is the false-failure probability of one audit; the CLI splits the
run's ``1 - confidence`` evenly over its audits, so the whole report wrongly
fails with probability at most ``1 - confidence``.

What it is not. ``eps_lb`` is a *lower* bound on the realised epsilon: it
approaches the true value only when ``F`` holds the extremal set (for shift
families with a monotone likelihood ratio, Laplace and Gaussian, a
half-line, by Neyman-Pearson) and ``n`` is large enough that ``L`` and
``U`` are close to ``p`` and ``q``. Gaussian mechanisms with a tiny delta
reach their epsilon only on sets of probability about delta, out of reach
of any feasible ``n``: their audit passes with ``eps_lb`` well below eps.
A pass is evidence of no gross violation at this resolution, not a proof.

Power (the chance to catch a broken mechanism) is computed exactly by
``false_pass_probability`` when the true ``p`` and ``q`` of a set are known
(the self-check's deliberately broken mechanisms).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray


def _scipy_stats() -> Any:
    """scipy.stats, imported on first use: it costs ~0.7 s and the CLI's other commands
    (``run`` among them) build the audit subparser without auditing anything."""
    from scipy import stats  # type: ignore[import-untyped, unused-ignore]

    return stats


FloatArray = NDArray[np.float64]

#: binomial mass ignored on each side when summing exactly (added back, conservatively)
_TAIL = 1e-15


def _as_counts(k: Any) -> NDArray[np.float64]:
    return np.asarray(k, dtype=np.float64)


def cp_lower(k: Any, n: int, beta: float) -> FloatArray:
    """One-sided Clopper-Pearson lower bound on ``p`` from ``k`` of ``n`` (level ``1 - beta``)."""
    counts = _as_counts(k)
    safe = np.maximum(counts, 1.0)  # Beta(0, .) is undefined; k = 0 gives 0 below
    bound = np.asarray(_scipy_stats().beta.ppf(beta, safe, n - counts + 1.0), dtype=np.float64)
    return np.where(counts > 0, bound, 0.0)


def cp_upper(k: Any, n: int, beta: float) -> FloatArray:
    """One-sided Clopper-Pearson upper bound on ``p`` from ``k`` of ``n`` (level ``1 - beta``)."""
    counts = _as_counts(k)
    safe = np.maximum(n - counts, 1.0)
    bound = np.asarray(_scipy_stats().beta.ppf(1.0 - beta, counts + 1.0, safe), dtype=np.float64)
    return np.where(counts < n, bound, 1.0)


def epsilon_lower_bound(lower_p: Any, upper_q: Any, delta: float) -> FloatArray:
    """``ln((L - delta) / U)`` elementwise, ``-inf`` where ``L <= delta`` (formula (2))."""
    lower = np.asarray(lower_p, dtype=np.float64)
    upper = np.asarray(upper_q, dtype=np.float64)
    margin = lower - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = np.log(np.where(margin > 0.0, margin, 1.0)) - np.log(upper)
    return np.where(margin > 0.0, bound, -np.inf)


def per_interval_level(alpha: float, inputs: int, test_sets: int) -> float:
    """Bonferroni: ``beta = alpha / (2 |I| |F|)`` for each one-sided interval."""
    return alpha / (2.0 * inputs * test_sets)


def plug_in_epsilon(k_p: int, k_q: int, n: int, delta: float) -> float:
    """The point estimate ``ln((k_p/n - delta) / (k_q/n))`` (for reports; ``nan`` if undefined)."""
    p, q = k_p / n, k_q / n
    if p - delta <= 0.0 or q <= 0.0:
        return math.nan
    return math.log((p - delta) / q)


def _support(n: int, p: float) -> tuple[int, int]:
    lo = int(_scipy_stats().binom.ppf(_TAIL, n, p))
    hi = int(_scipy_stats().binom.ppf(1.0 - _TAIL, n, p))
    return max(lo, 0), min(hi, n)


def false_pass_probability(
    n: int, p: float, q: float, beta: float, epsilon: float, delta: float
) -> float:
    """Exact ``P[eps_lb(S) <= epsilon]`` for one set with true probabilities ``p`` and ``q``.

    ``K_p ~ Bin(n, p)`` and ``K_q ~ Bin(n, q)`` independent, ``L`` and ``U``
    at level ``beta``. ``eps_lb <= eps`` iff ``L(K_p) <= delta + e^eps
    U(K_q)``; ``L`` is increasing, so for each ``k_q`` this is ``K_p <=
    k*(k_q)``, and the probability is ``sum_kq P[K_q = k_q] P[K_p <=
    k*(k_q)]``. The sum runs over the central ``1 - 2e-15`` of ``K_q``; the
    rest, and ``P[K_p < start of its range]``, are added in full, so the
    result is an upper bound, exact to about ``1e-14``. A broken mechanism
    passes an audit only if *every* set of the family gives ``eps_lb <= eps``,
    so the minimum of this over the family bounds the chance of a wrong pass.
    """
    kp_lo, kp_hi = _support(n, p)
    kq_lo, kq_hi = _support(n, q)
    kp = np.arange(kp_lo, kp_hi + 1)
    kq = np.arange(kq_lo, kq_hi + 1)
    lower = cp_lower(kp, n, beta)
    limit = delta + math.exp(epsilon) * cp_upper(kq, n, beta)
    # k*(k_q): index of the last k_p (in range) with L(k_p) <= limit
    last = np.searchsorted(lower, limit, side="right") - 1
    below = float(_scipy_stats().binom.cdf(kp_lo - 1, n, p)) if kp_lo > 0 else 0.0
    cdf = np.asarray(_scipy_stats().binom.cdf(kp, n, p), dtype=np.float64)
    pass_given_kq = np.where(last >= 0, cdf[np.maximum(last, 0)], below)
    pass_given_kq = np.where(last >= len(kp) - 1, 1.0, pass_given_kq)
    weights = np.asarray(_scipy_stats().binom.pmf(kq, n, q), dtype=np.float64)
    outside = 1.0 - float(weights.sum())
    total = float(np.dot(weights, pass_given_kq)) + max(outside, 0.0) + _TAIL
    return min(total, 1.0)

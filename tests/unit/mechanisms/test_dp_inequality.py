"""Empirical privacy audit: P[M(x) in S] <= e^eps P[M(x') in S] + delta on test sets.

By Theorem 4.1 (DESIGN.md) it is enough to check an algebra generating the
output sigma-algebra: half-lines and intervals on the real line, all subsets
of a finite domain (singletons and their complements are the binding ones).

Slack. With n draws per input, the DKW inequality gives
``P(sup_t |F_n(t) - F(t)| > e_n) <= 2 exp(-2 n e_n^2)``; we choose
``e_n = sqrt(ln(2 / a) / (2 n))`` with a = 1e-6 per sample. On that event,
for every half-line S simultaneously ``|P_hat(S) - P(S)| <= e_n`` and for
every interval ``<= 2 e_n``. Since the true probabilities satisfy the
inequality, the empirical ones satisfy it with slack ``k e_n (1 + e^eps)``
(k = 1 half-lines, k = 2 intervals). Two samples per test:
false-failure probability <= 2e-6 per test.
For randomized response we use Hoeffding per event with a union bound.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from privstream.mechanisms import LaplaceMechanism, RandomizedResponse
from privstream.mechanisms.integer_laplace import IntegerLaplaceMechanism
from privstream.testing import SeededSource

N = 200_000
ALPHA_PER_SAMPLE = 1e-6
DKW = math.sqrt(math.log(2.0 / ALPHA_PER_SAMPLE) / (2.0 * N))


def _ecdf(sorted_sample: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Empirical P[X <= t]."""
    return np.searchsorted(sorted_sample, t, side="right") / len(sorted_sample)


def _worst_excess(
    a: np.ndarray, b: np.ndarray, eps: float, grid: np.ndarray
) -> tuple[float, float]:
    """max over half-lines / intervals of P_hat_a(S) - e^eps P_hat_b(S)."""
    fa, fb = _ecdf(a, grid), _ecdf(b, grid)
    lower = fa - math.exp(eps) * fb  # S = (-inf, t]
    upper = (1.0 - fa) - math.exp(eps) * (1.0 - fb)  # S = (t, inf)
    half = float(max(lower.max(), upper.max()))
    # intervals (s, t] on the grid: P(s,t] = F(t) - F(s)
    ia = fa[None, :] - fa[:, None]
    ib = fb[None, :] - fb[:, None]
    triangle = np.triu(np.ones_like(ia, dtype=bool), k=1)
    inter = float(np.max(np.where(triangle, ia - math.exp(eps) * ib, -np.inf)))
    return half, inter


def _laplace_samples(mech: LaplaceMechanism, seed: int) -> tuple[np.ndarray, np.ndarray]:
    source = SeededSource(seed)
    lo = np.sort(mech.release(np.full(N, mech.lower), source))
    hi = np.sort(mech.release(np.full(N, mech.upper), source))
    return lo, hi


def _grid(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    both = np.concatenate([a, b])
    return np.quantile(both, np.linspace(0.0005, 0.9995, 301))


@pytest.mark.parametrize(
    ("eps", "delta", "calibration", "seed"),
    [
        (1.0, 0.0, "tight", 201),
        (0.5, 0.1, "tight", 202),
        (0.1, 0.1, "thesis", 203),
        (2.0, 1e-6, "tight", 204),
    ],
)
def test_laplace_satisfies_dp_inequality(
    eps: float, delta: float, calibration: str, seed: int
) -> None:
    mech = LaplaceMechanism(
        bounds=(1504.0, 4500.0),
        epsilon=eps,
        delta=delta,
        calibration=calibration,  # type: ignore[arg-type]
    )
    lo, hi = _laplace_samples(mech, seed)
    grid = _grid(lo, hi)
    for a, b in ((lo, hi), (hi, lo)):  # both directions of the neighbour relation
        half, inter = _worst_excess(a, b, eps, grid)
        assert half <= delta + DKW * (1.0 + math.exp(eps))
        assert inter <= delta + 2.0 * DKW * (1.0 + math.exp(eps))


@pytest.mark.parametrize(
    ("bounds", "eps", "delta", "seed"),
    [
        ((0, 20_000), 1.0, 0.0, 207),  # t = 20000: two-level sampler (a digit and the head)
        ((0, 10), 5.0, 0.0, 208),  # t = 2: one level, the head
        ((0, 3), 12.0, 0.0, 209),  # t = 0.25: one cell, every word beyond it extends
        ((0, 50_000), 0.5, 1e-6, 210),
    ],
)
def test_integer_laplace_satisfies_dp_inequality(
    bounds: tuple[int, int], eps: float, delta: float, seed: int
) -> None:
    # the exact-threshold sampler in every regime; DKW slack as above, alpha <= 2e-6
    mech = IntegerLaplaceMechanism(bounds=bounds, epsilon=eps, delta=delta)
    source = SeededSource(seed)
    lo = np.sort(mech.release(np.full(N, bounds[0]), source)).astype(np.float64)
    hi = np.sort(mech.release(np.full(N, bounds[1]), source)).astype(np.float64)
    grid = np.unique(_grid(lo, hi))
    for a, b in ((lo, hi), (hi, lo)):
        half, inter = _worst_excess(a, b, eps, grid)
        assert half <= delta + DKW * (1.0 + math.exp(eps))
        assert inter <= delta + 2.0 * DKW * (1.0 + math.exp(eps))


def test_tight_laplace_reaches_delta_on_some_half_line() -> None:
    # tightness seen empirically: the worst half-line attains delta (within the DKW slack)
    eps, delta = 0.5, 0.1
    mech = LaplaceMechanism(bounds=(0.0, 100.0), epsilon=eps, delta=delta)
    lo, hi = _laplace_samples(mech, 205)
    half, _ = _worst_excess(lo, hi, eps, _grid(lo, hi))
    # grid resolution costs at most a few thousandths here; alpha <= 2e-6
    assert half >= delta - DKW * (1.0 + math.exp(eps)) - 0.005


@pytest.mark.parametrize(("eps", "delta"), [(1.0, 0.0), (0.5, 0.1)])
def test_negative_control_half_scale_laplace_violates(eps: float, delta: float) -> None:
    calibrated = LaplaceMechanism(bounds=(0.0, 10.0), epsilon=eps, delta=delta)
    eps0 = 10.0 / calibrated.scale
    # delta = 0 Laplace at privacy loss 2*eps0 has exactly half the calibrated scale
    half_scale = LaplaceMechanism(bounds=(0.0, 10.0), epsilon=2.0 * eps0, delta=0.0)
    assert half_scale.scale == pytest.approx(calibrated.scale / 2.0, rel=1e-10)
    lo, hi = _laplace_samples(half_scale, 206)
    half, _ = _worst_excess(lo, hi, eps, _grid(lo, hi))
    # the true excess is 1 - e^{(eps - 2 eps0)/2} - delta >= 0.25 here, far beyond slack
    assert half > delta + DKW * (1.0 + math.exp(eps))


# --- randomized response: all singletons and their complements ------------------------


def _rr_frequencies(rr: RandomizedResponse, seed: int) -> np.ndarray:
    """Row t: empirical output distribution for true index t."""
    size = rr.m + 1
    source = SeededSource(seed)
    rows = [
        np.bincount(rr.release(np.full(N, t, dtype=np.int64), source), minlength=size) / N
        for t in range(size)
    ]
    return np.array(rows)


def _rr_max_excess(freq: np.ndarray, eps: float) -> float:
    size = freq.shape[0]
    worst = -np.inf
    for x in range(size):
        for y in range(size):
            if x == y:
                continue
            single = freq[x] - math.exp(eps) * freq[y]  # S = {v}
            compl = (1.0 - freq[x]) - math.exp(eps) * (1.0 - freq[y])  # S = D \ {v}
            worst = max(worst, float(single.max()), float(compl.max()))
    return worst


def _hoeffding(size: int, total_alpha: float) -> float:
    # one event per (true value, output value); complements share the same error
    events = size * size
    return math.sqrt(math.log(2.0 * events / total_alpha) / (2.0 * N))


@pytest.mark.parametrize(
    ("size", "eps", "delta", "seed"),
    [(2, math.log(3.0), 0.0, 301), (3, 1.0, 0.05, 302), (5, 0.3, 0.0, 303), (48, 2.0, 1e-3, 304)],
)
def test_randomized_response_satisfies_dp_inequality(
    size: int, eps: float, delta: float, seed: int
) -> None:
    rr = RandomizedResponse(domain=list(range(size)), epsilon=eps, delta=delta)
    freq = _rr_frequencies(rr, seed)
    slack = _hoeffding(size, 1e-6) * (1.0 + math.exp(eps))  # alpha = 1e-6 per test
    assert _rr_max_excess(freq, eps) <= delta + slack


def test_randomized_response_is_tight_on_the_true_singleton() -> None:
    # 1 - m p = e^eps p + delta: the singleton {x} attains delta (alpha = 1e-6)
    eps, delta = 1.0, 0.05
    rr = RandomizedResponse(domain=["a", "b", "c"], epsilon=eps, delta=delta)
    freq = _rr_frequencies(rr, 305)
    slack = _hoeffding(3, 1e-6) * (1.0 + math.exp(eps))
    assert _rr_max_excess(freq, eps) >= delta - slack


def test_negative_control_rr_with_too_small_p_violates() -> None:
    eps = 1.0
    rr = RandomizedResponse(domain=["a", "b", "c"], epsilon=2.0 * eps)
    freq = _rr_frequencies(rr, 306)
    slack = _hoeffding(3, 1e-6) * (1.0 + math.exp(eps))
    assert _rr_max_excess(freq, eps) > slack

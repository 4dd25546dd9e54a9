"""Statistical checks shared by the piecewise and hybrid tests (fixed seeds, stated risks)."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray
from privstream.estimate.unit_mean import law_variance
from privstream.mechanisms.unit_interval import UnitIntervalMechanism
from privstream.testing import SeededSource


def exp_upper(epsilon: float) -> Fraction:
    """A rational ``>= e^eps`` (60 digits, one unit of the 50th added): the reference."""
    with localcontext() as ctx:
        ctx.prec = 60
        value = Fraction(Decimal(epsilon).exp())
    return value * (1 + Fraction(1, 10**50))


def draws(mech: UnitIntervalMechanism, value: float, n: int, seed: int) -> NDArray[np.float64]:
    return mech.release(np.full(n, value), SeededSource(seed))


def draws_at_the_law(
    mech: UnitIntervalMechanism, x: float, seed: int, n: int = 200_000
) -> tuple[NDArray[np.float64], float]:
    """``n`` draws at ``x`` and the variance the law gives there (field units), after checking
    their mean against ``x`` and their variance against the law, each within 5 standard
    errors (normal approximation, the fourth moment from the draws): false failure below
    1e-5 per check."""
    y = draws(mech, x, n, seed)
    t = (x - mech.middle) / mech.half
    law = mech.variance_law()
    variance = mech.half**2 * (law.square * t * t + law.constant)
    assert abs(y.mean() - x) <= 5.0 * math.sqrt(variance / n)
    fourth = float(np.mean((y - y.mean()) ** 4))
    assert abs(y.var() - variance) <= 5.0 * math.sqrt((fourth - variance**2) / n)
    return y, variance


def interval_violation(
    first: NDArray[np.float64], second: NDArray[np.float64], epsilon: float, risk: float
) -> float:
    """Largest ``P1(S) - e^eps P2(S) - tolerance`` over intervals ``S`` between quantiles.

    Hoeffding: each empirical probability is within ``sqrt(ln(2K / risk) / (2 n))`` of its
    truth for all ``K`` events of both samples except with probability ``<= risk``; a
    mechanism that is eps-DP then gives a value ``<= 0``.
    """
    edges = np.unique(np.quantile(np.concatenate([first, second]), np.linspace(0, 1, 21)))
    events = [(lo, hi) for i, lo in enumerate(edges) for hi in edges[i + 1 :]]
    events += [(-math.inf, e) for e in edges] + [(e, math.inf) for e in edges]
    k = 2 * len(events)
    tol1 = math.sqrt(math.log(2 * k / risk) / (2 * len(first)))
    tol2 = math.sqrt(math.log(2 * k / risk) / (2 * len(second)))
    worst = -math.inf
    for lo, hi in events:
        p1 = float(np.mean((first > lo) & (first <= hi)))
        p2 = float(np.mean((second > lo) & (second <= hi)))
        for a, b in ((p1, p2), (p2, p1)):
            worst = max(worst, a - math.exp(epsilon) * b - tol1 - math.exp(epsilon) * tol2)
    return worst


def coverage(
    mech: UnitIntervalMechanism, values: NDArray[np.float64], trials: int, seed: int
) -> float:
    """Share of ``trials`` 95% intervals (variance-law plug-in) holding the clamped mean."""
    n = len(values)
    column = np.tile(values, trials)
    released = mech.release(column, SeededSource(seed)).reshape(trials, n)
    t = (released - mech.middle) / mech.half
    truth = float(np.mean(np.clip(values, mech.lower, mech.upper)))
    hits = 0
    for row in t:
        noise = law_variance(mech, float(np.mean(row)), float(np.mean(row**2)))
        centre = mech.middle + mech.half * float(np.mean(row))
        half_width = 1.959963984540054 * mech.half * math.sqrt(noise / n)
        hits += abs(centre - truth) <= half_width
    return hits / trials

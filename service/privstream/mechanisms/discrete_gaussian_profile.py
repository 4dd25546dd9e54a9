"""The ideal discrete Gaussian's privacy profile, the zCDP conversion, sigma calibration.

Claim: ``discrete_gaussian_delta`` is the exact hockey-stick divergence of
``N_Z(0, sigma^2)`` at integer shift ``Delta`` (CKS 2020, Thm. 7, as a sum in
log space, omitted tails bounded and added); above ``MAX_EXACT_SIGMA`` the
zCDP conversion ``concentrated_delta`` with ``rho = Delta^2 / (2 sigma^2)``
(CKS 2020, Prop. 5), valid but slightly looser.

Calibration: ``smallest_sigma`` bisects on a profile decreasing in sigma and
returns the bracket's upper end, which always satisfies ``delta(hi) <= delta``.

The sampler that realises the distribution, and its own exact profile, are in
``privstream.mechanisms.discrete_gaussian``.

Proof, step by step, with the function each step proves:
docs/proofs/discrete-gaussian.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

import numpy as np

from privstream.errors import MechanismError

#: above this sigma ``discrete_gaussian_delta`` uses the zCDP bound
MAX_EXACT_SIGMA: Final = 2.0**16
#: the exact profile never sums beyond |z| = WINDOW_SIGMAS * sigma (tail bound instead)
WINDOW_SIGMAS: Final = 40.0
#: the sampler's table and the profile's lower window reach TAIL_SIGMAS * sigma
TAIL_SIGMAS: Final = 12.0

_UNIT_ROUNDOFF: Final = 2.0**-53


def rounding_margin(epsilon: float) -> float:
    """Relative slack added to float-evaluated deltas (>= 40x the rounding error)."""
    return 2.0**-40 + 8.0 * _UNIT_ROUNDOFF * abs(epsilon)


def check_sigma(sigma: float) -> float:
    """``sigma`` as a float, refused unless finite and positive."""
    s = float(sigma)
    if not math.isfinite(s) or s <= 0.0:
        raise MechanismError(f"sigma {sigma!r} must be a finite number > 0")
    return s


def gauss_tail_sum(t: float, sigma: float) -> float:
    """Upper bound on ``sum_{z > t} exp(-z^2/(2 sigma^2))`` for ``t >= 0`` (integral bound)."""
    return sigma * math.sqrt(math.pi / 2.0) * math.erfc(t / (sigma * math.sqrt(2.0)))


def _log_normaliser(sigma: float) -> float:
    """``ln N`` with ``N = sum_z exp(-z^2 / (2 sigma^2))`` (Poisson summation for sigma >= 1)."""
    if sigma >= 1.0:
        # N = sigma sqrt(2 pi) * sum_k exp(-2 pi^2 sigma^2 k^2), exact identity
        k = np.arange(1, 4, dtype=np.float64)
        series = 1.0 + 2.0 * float(np.sum(np.exp(-2.0 * math.pi**2 * sigma**2 * k * k)))
        return math.log(sigma * math.sqrt(2.0 * math.pi) * series)
    reach = math.ceil(WINDOW_SIGMAS * sigma) + 2
    z = np.arange(1, reach + 1, dtype=np.float64)
    return math.log(1.0 + 2.0 * math.fsum(np.exp(-(z * z) / (2.0 * sigma * sigma)).tolist()))


def concentrated_delta(rho: float, epsilon: float) -> float:
    """Delta implied by ``rho``-zCDP at ``epsilon`` (CKS 2020, Corollary 13).

    ``delta = inf_{alpha > 1} exp((alpha-1)(alpha rho - eps)) (1 - 1/alpha)^alpha / (alpha - 1)``.
    Every ``alpha`` gives a valid bound; the derivative of the exponent,
    ``(2 alpha - 1) rho - eps + ln(1 - 1/alpha)``, increases in ``alpha`` and is
    bisected for its root. A relative slack of ``2^-36`` covers float rounding.
    """
    if rho < 0.0 or not math.isfinite(rho):
        raise MechanismError(f"rho {rho!r} must be a finite number >= 0")
    if rho == 0.0:
        return 0.0
    lo, hi = 1.0 + 1e-12, (epsilon + 1.0) / (2.0 * rho) + 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if (2.0 * mid - 1.0) * rho - epsilon + math.log1p(-1.0 / mid) < 0.0:
            lo = mid
        else:
            hi = mid
    alpha = hi
    exponent = (alpha - 1.0) * (alpha * rho - epsilon) + alpha * math.log1p(-1.0 / alpha)
    exponent -= math.log(alpha - 1.0)
    if exponent >= 0.0:
        return 1.0
    return min(1.0, math.exp(exponent) * (1.0 + 2.0**-36))


def discrete_gaussian_delta(epsilon: float, sigma: float, sensitivity: int) -> float:
    """Exact ``delta(eps)`` of the ideal ``N_Z(0, sigma^2)`` for integer ``sensitivity``.

    ``sum_z max(0, p(z) - e^eps p(z - Delta))`` (see the proof page), an
    upper bound including float rounding and the omitted tails.
    Monotone in ``Delta`` (log-concave ``p``), so it covers every smaller shift.
    """
    s = check_sigma(sigma)
    delta_int = int(sensitivity)
    if delta_int < 0:
        raise MechanismError(f"sensitivity {sensitivity!r} must be >= 0")
    if delta_int == 0:
        return 0.0
    if s > MAX_EXACT_SIGMA:
        return concentrated_delta(delta_int**2 / (2.0 * s * s), epsilon)
    reach = math.ceil(WINDOW_SIGMAS * s) + 1
    boundary = delta_int / 2.0 - epsilon * s * s / delta_int  # loss > eps iff z < boundary
    top = min(math.ceil(boundary) - 1, reach)
    log_norm = _log_normaliser(s)
    # terms are <= p(z): the omitted z > reach and z < lower are bounded by tail sums
    lower = max(-reach, min(top, 0) - math.ceil(TAIL_SIGMAS * s) - 1)
    omitted = (gauss_tail_sum(float(reach), s) + gauss_tail_sum(float(-lower), s)) * math.exp(
        -log_norm
    )
    if top < lower:
        return min(1.0, omitted)
    z = np.arange(lower, top + 1, dtype=np.float64)
    p = np.exp(-(z * z) / (2.0 * s * s) - log_norm)
    loss = (delta_int * delta_int - 2.0 * delta_int * z) / (2.0 * s * s)
    terms = p * -np.expm1(np.minimum(epsilon - loss, 0.0))
    mass = float(np.sum(p))  # every z in the window has loss > eps: the positive region
    total = float(np.sum(terms)) + mass * rounding_margin(epsilon) + omitted
    return min(1.0, total)


def smallest_sigma(
    profile: Callable[[float], float], delta: float, start: float, *, rtol: float = 1e-10
) -> float:
    """``_smallest_sigma``; a bracket that leaves the double range (an epsilon so large that
    no sigma down to the least double exceeds delta) is a ``MechanismError``, not a
    ``ZeroDivisionError``."""
    try:
        return _smallest_sigma(profile, delta, start, rtol=rtol)
    except (ZeroDivisionError, OverflowError):
        raise MechanismError(
            f"no sigma within the double range calibrates delta {delta!r} (epsilon too large "
            "for this mechanism's calibration); lower epsilon"
        ) from None


def _smallest_sigma(
    profile: Callable[[float], float], delta: float, start: float, *, rtol: float = 1e-10
) -> float:
    """Smallest sigma (to ``rtol`` in delta) with ``profile(sigma) <= delta``, safe side.

    ``profile`` must decrease in sigma. Returns ``hi`` with ``profile(hi) <= delta``
    and ``profile(hi) >= (1 - rtol) delta`` or ``hi`` within ``1e-15`` of ``lo``.
    """
    if not 0.0 < delta < 1.0:
        raise MechanismError(f"delta {delta!r} must lie in (0, 1) to calibrate sigma")
    lo = hi = check_sigma(start)
    if profile(hi) <= delta:
        for _ in range(2100):
            lo = lo / 2.0
            if profile(lo) > delta:
                break
        else:  # pragma: no cover -- profile(sigma) -> 1 as sigma -> 0
            raise MechanismError("could not bracket sigma from below")
        hi = lo * 2.0
    else:
        for _ in range(2100):
            hi = hi * 2.0
            if profile(hi) <= delta:
                break
        else:
            raise MechanismError(f"no sigma reaches delta {delta!r}")
        lo = hi / 2.0
    value = profile(hi)
    for _ in range(400):
        if value >= (1.0 - rtol) * delta or hi / lo - 1.0 <= 1e-15:
            break
        mid = lo * math.sqrt(hi / lo)  # geometric mean without overflow
        at_mid = profile(mid)
        if at_mid <= delta:
            hi, value = mid, at_mid
        else:
            lo = mid
    return hi


def calibrate_discrete_gaussian(
    epsilon: float, delta: float, sensitivity: int, *, rtol: float = 1e-9
) -> float:
    """Smallest sigma with ``discrete_gaussian_delta(eps, sigma, Delta) <= delta`` (bisection)."""
    start = max(math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon, 1e-3)
    return smallest_sigma(
        lambda s: discrete_gaussian_delta(epsilon, s, sensitivity), delta, start, rtol=rtol
    )

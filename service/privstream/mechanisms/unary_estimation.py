r"""Analyst side of unary encoding: debiased item shares and their standard errors.

Analyst side (``estimate_item_frequencies``). With ``f_j`` the share of
records whose set holds item ``j`` and ``mean_j`` the share of released
vectors with bit ``j`` set, ``E[mean_j] = f_j p + (1 - f_j) q`` and
``f_hat_j = (mean_j - q)/(p - q)`` is unbiased; given the data the bits are
independent, so::

    Var[f_hat_j] = (f_j p (1 - p) + (1 - f_j) q (1 - q)) / (n (p - q)^2)

(for OUE at ``f_j = 0`` this is Wang et al.'s ``4 e^e1 / (n (e^e1 - 1)^2)``).
``estimator_variance`` gives the worse of ``f_j = 0`` and ``f_j = 1``; the
standard errors ``estimate_item_frequencies`` returns are this formula at
``f_hat_j`` clipped to [0, 1] (the binomial plug-in
``sqrt(mean_j (1 - mean_j) / n) / (p - q)`` would be conservative, by
concavity, but wider than needed when items have mixed frequencies).


The same estimator serves ``set`` fields and categorical fields with
``mechanism: unary_encoding`` (one item per record, ``max_items = 1``).

References
----------
* T. Wang, J. Blocki, N. Li, S. Jha, *Locally differentially private
  protocols for frequency estimation*, USENIX Security 2017, Sec. 4 (OUE).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.unary_calibration import Variant, unary_probabilities


def estimate_item_frequencies(
    bits: NDArray[np.bool_],
    epsilon: float,
    *,
    max_items: int,
    variant: Variant = "optimized",
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Debiased share of records holding each item, and its standard error.

    ``bits`` is an ``(n, |U|)`` array of releases made with the same
    ``epsilon``, ``max_items`` and ``variant``. ``f_hat_j = (mean_j - q)/(p - q)``,
    not clipped to [0, 1] (clipping would bias it); the standard error is the
    exact variance given the data at ``f_hat_j`` clipped to [0, 1].
    """
    arr = np.asarray(bits, dtype=np.bool_)
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise MechanismError(f"expected a non-empty (n, |U|) array of reports, got {arr.shape}")
    n, d = arr.shape
    p, q = unary_probabilities(d, max_items, epsilon, variant)
    estimates = (arr.mean(axis=0) - q) / (p - q)
    f = np.clip(estimates, 0.0, 1.0)
    spread = f * p * (1.0 - p) + (1.0 - f) * q * (1.0 - q)
    stderr = np.sqrt(spread / n) / (p - q)
    return estimates, stderr


def estimate_item_frequencies_from_counts(
    counts: Sequence[int] | NDArray[np.int64],
    n: int,
    epsilon: float,
    *,
    max_items: int,
    variant: Variant = "optimized",
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``estimate_item_frequencies`` from per-item counts, for streams too long to hold.

    ``counts[j]`` is how many of ``n`` released vectors have bit ``j`` set
    (one count per universe item, in the universe's order: ``p`` and ``q``
    depend on the universe size). Same estimator and standard error:
    ``f_hat_j = (counts_j / n - q) / (p - q)``.
    """
    arr = np.asarray(counts, dtype=np.float64)
    if arr.ndim != 1 or len(arr) == 0:
        raise MechanismError(f"expected one count per universe item, got shape {arr.shape}")
    if n < 1:
        raise MechanismError(f"the estimator needs at least one record, got n = {n}")
    if np.any(arr < 0) or np.any(arr > n):
        raise MechanismError(f"counts must lie in [0, n = {n}]")
    p, q = unary_probabilities(len(arr), max_items, epsilon, variant)
    estimates: NDArray[np.float64] = (arr / n - q) / (p - q)
    f = np.clip(estimates, 0.0, 1.0)
    spread = f * p * (1.0 - p) + (1.0 - f) * q * (1.0 - q)
    stderr: NDArray[np.float64] = np.sqrt(spread / n) / (p - q)
    return estimates, stderr

r"""Consistent frequencies: Norm-Sub, the Euclidean projection onto the simplex.

The debiased frequency vectors of randomized response and local hashing
are unbiased but not a distribution: entries can be negative and, for
local hashing, need not sum to 1. Norm-Sub (Wang et al. 2020,
"Locally Differentially Private Frequency Estimation with Consistency",
NDSS) subtracts one shift from every entry and clips at 0::

    f'_v = max(f_v + delta, 0),   delta such that sum_v f'_v = 1

That is the Euclidean projection of ``f`` onto the probability simplex
(the KKT conditions of ``min ||f' - f||^2`` over ``f' >= 0, sum f' = 1``
give exactly one shared shift and the clip). ``delta`` is found by sorting:
with ``u`` the entries in decreasing order and ``rho`` the largest ``j`` with
``u_j + (1 - sum_{i<=j} u_i) / j > 0``, ``delta = (1 - sum_{i<=rho} u_i) /
rho`` (Duchi et al. 2008, Fig. 1).

The projected vector is biased, most for rare values (pushed to 0, the
others pulled down to pay for them), so it has no per-value standard
errors or intervals; it usually has a smaller total squared error when
many true frequencies are near 0 (large domains, small epsilon).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError


def project_to_simplex(estimates: NDArray[np.float64]) -> NDArray[np.float64]:
    """Norm-Sub: ``max(f + delta, 0)`` with the ``delta`` that makes it sum to 1."""
    f = np.asarray(estimates, dtype=np.float64)
    if f.ndim != 1 or len(f) == 0 or not np.all(np.isfinite(f)):
        raise MechanismError(f"expected a finite, non-empty frequency vector, got {f.shape}")
    u = np.sort(f)[::-1]
    shifts = (1.0 - np.cumsum(u)) / np.arange(1, len(u) + 1)
    rho = int(np.flatnonzero(u + shifts > 0)[-1])  # j = 0 always qualifies: u_0 + 1 - u_0 > 0
    projected: NDArray[np.float64] = np.maximum(f + shifts[rho], 0.0)
    return projected

r"""``mechanism: auto`` for categorical fields: the least estimator variance.

The candidates are k-ary randomized response (RR) and optimal local hashing
(OLH). Optimized unary encoding (OUE) is not a candidate: it exists only for
``set`` fields (``unary_encoding``), not as a categorical mechanism; its
variance at f = 0, ``4 e^eps / (n (e^eps - 1)^2)``, equals OLH's with
unrounded ``g``, so leaving it out costs at most the rounding of ``g``.

Criterion: the summed variance of the debiased frequency vector, the
expected squared error over the whole domain. Each value's variance given
the data, ``frequency_variance(n, f)``, is linear in its true share ``f``:
``f A + (1 - f) B`` with ``A`` its value at ``f = 1`` and ``B`` at ``f = 0``.
Summed over the ``k`` values, whose shares add up to 1, it is::

    A + (k - 1) B

whatever the true distribution: the criterion is exact for every truth
(so also its worst case). The per-value worst case ``max(A, B)``
(``estimator_variance``) is the wrong criterion here: at large epsilon it
is ``A`` for both mechanisms, ignores the ``k - 1`` values a record does not
hold, and would pick local hashing at eps = 4 from k = 56 where randomized
response has the smaller error up to k = 165. Both terms are
``(something) / n``, so the choice does not depend on ``n``;
``VARIANCE_N`` only scales the numbers ``explain`` shows. It depends on the
domain size ``k`` and ``(epsilon, delta)`` only, never on the domain's
values or their order.

Where it lands (Wang et al. 2017, Sec. 5): at ``f = 0`` with ``p = e^eps /
(e^eps + k - 1)``, RR's variance is ``(k - 2 + e^eps) / (n (e^eps - 1)^2)``
and OLH's ``4 e^eps / (n (e^eps - 1)^2)``, so RR wins iff ``k < 3 e^eps + 2``.
The ``A`` terms and the integer ``g`` move the boundary slightly; the
exact variances decide. RR stays the only candidate when ``delta > 0``
(OLH is pure epsilon-DP and would waste the delta).

Ties (equal variances, to the double) go to the first candidate in
``CANDIDATES`` order, so the choice is a function of (k, epsilon, delta).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from privstream.mechanisms.local_hashing import OptimalLocalHashing
from privstream.mechanisms.randomized_response import RandomizedResponse


class FrequencyOracle(Protocol):
    """A mechanism with an exact per-value frequency variance (RR, OLH)."""

    def frequency_variance(self, n: int, frequency: float) -> float: ...


#: the records at which ``explain`` shows the variances (the choice does not depend on it)
VARIANCE_N = 1000
#: candidates in tie-break order
CANDIDATES = ("randomized_response", "local_hashing")


def vector_variance(mechanism: FrequencyOracle, domain_size: int, n: int) -> float:
    """``A + (k - 1) B``: the summed variance of the frequency vector, for every truth."""
    return mechanism.frequency_variance(n, 1.0) + (domain_size - 1) * mechanism.frequency_variance(
        n, 0.0
    )


def frequency_variances(
    domain_size: int, epsilon: float, delta: float = 0.0, *, n: int = VARIANCE_N
) -> dict[str, float]:
    """Summed frequency-vector variance at ``n`` records of each candidate that can run here."""
    rr = RandomizedResponse(domain=range(domain_size), epsilon=epsilon, delta=delta)
    variances = {"randomized_response": vector_variance(rr, domain_size, n)}
    if delta == 0.0:
        olh = OptimalLocalHashing(epsilon=epsilon)
        variances["local_hashing"] = vector_variance(olh, domain_size, n)
    return variances


def least_variance(variances: Mapping[str, float]) -> str:
    """The candidate with the least variance; ties go to the earlier one in ``CANDIDATES``."""
    ranked = [name for name in CANDIDATES if name in variances]
    return min(ranked, key=lambda name: (variances[name], ranked.index(name)))

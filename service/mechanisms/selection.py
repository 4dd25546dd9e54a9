r"""``mechanism: auto`` for categorical fields: the least estimator variance.

The candidates are k-ary randomized response (RR) and optimal local hashing
(OLH). Optimized unary encoding (OUE) is not a candidate: it exists only for
``set`` fields (``unary_encoding``), not as a categorical mechanism; its
variance at f = 0, ``4 e^eps / (n (e^eps - 1)^2)``, equals OLH's with
unrounded ``g``, so leaving it out costs at most the rounding of ``g``.

Criterion: each candidate's ``estimator_variance(n)``, the exact variance of
the debiased frequency of one value given the data, at its worst true
frequency (both are linear in ``f``, so the worst is ``f = 0`` or ``f = 1``).
Both variances are ``(something) / n``, so the choice does not depend on
``n``; ``VARIANCE_N`` only scales the numbers shown by ``explain``. It
depends on the domain size ``k`` and ``(epsilon, delta)`` only, never on the
domain's values or their order.

Where it lands (Wang et al. 2017, Sec. 5): at ``f = 0`` with ``p = e^eps /
(e^eps + k - 1)``, RR's variance is ``(k - 2 + e^eps) / (n (e^eps - 1)^2)``
and OLH's ``4 e^eps / (n (e^eps - 1)^2)``, so RR wins iff ``k < 3 e^eps + 2``.
The worst case over ``f`` and the integer ``g`` move the boundary slightly;
the exact variances decide. RR stays the only candidate when ``delta > 0``
(OLH is pure epsilon-DP and would waste the delta).

Ties (equal variances, to the double) go to the first candidate in
``CANDIDATES`` order, so the choice is a function of (k, epsilon, delta).
"""

from __future__ import annotations

from collections.abc import Mapping

from service.mechanisms.local_hashing import OptimalLocalHashing
from service.mechanisms.randomized_response import RandomizedResponse

#: the records at which ``explain`` shows the variances (the choice does not depend on it)
VARIANCE_N = 1000
#: candidates in tie-break order
CANDIDATES = ("randomized_response", "local_hashing")


def frequency_variances(
    domain_size: int, epsilon: float, delta: float = 0.0, *, n: int = VARIANCE_N
) -> dict[str, float]:
    """Worst-case ``Var[f_hat]`` at ``n`` records of each candidate that can run here."""
    rr = RandomizedResponse(domain=range(domain_size), epsilon=epsilon, delta=delta)
    variances = {"randomized_response": rr.estimator_variance(n)}
    if delta == 0.0:
        variances["local_hashing"] = OptimalLocalHashing(epsilon=epsilon).estimator_variance(n)
    return variances


def least_variance(variances: Mapping[str, float]) -> str:
    """The candidate with the least variance; ties go to the earlier one in ``CANDIDATES``."""
    ranked = [name for name in CANDIDATES if name in variances]
    return min(ranked, key=lambda name: (variances[name], ranked.index(name)))

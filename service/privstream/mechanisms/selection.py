"""``mechanism: auto`` for categorical fields: the least estimator variance.

Claim: the choice among k-ary randomized response, optimal local hashing,
subset selection and optimized unary encoding is a function of the domain size ``k``,
``(epsilon, delta)`` and the candidates the field allows only, never of the
domain's values, their order or any record; so choosing releases nothing.

Criterion: the summed variance of the debiased frequency vector,
``A + (k - 1) B`` (``A``, ``B`` a value's variance at ``f = 1`` and ``f = 0``),
exact for every true distribution and independent of ``n``. Rule: the least,
except that OLH is chosen where OUE or SS (array outputs) is least and OLH is
within ``OLH_MARGIN`` (5%); only RR when ``delta > 0``; OUE and SS only up to
``MAX_UNIVERSE`` values, SS only where its ``d >= 2`` (``d = 1`` is RR); ties
to the first in ``CANDIDATES``.

Proof, step by step, with the function each step proves, and the four
variances (Wang et al. 2017, Sec. 4-5): docs/proofs/selection.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from privstream.mechanisms.local_hashing import OptimalLocalHashing
from privstream.mechanisms.randomized_response import RandomizedResponse
from privstream.mechanisms.subset_selection import SubsetSelection, optimal_subset_size
from privstream.mechanisms.unary_encoding import MAX_UNIVERSE, UnaryEncoding


class FrequencyOracle(Protocol):
    """A mechanism with an exact per-value frequency variance (RR, OLH, SS, OUE)."""

    def frequency_variance(self, n: int, frequency: float) -> float: ...


#: the records at which ``explain`` shows the variances (the choice does not depend on it)
VARIANCE_N = 1000
#: candidates in tie-break order
CANDIDATES = ("randomized_response", "local_hashing", "subset_selection", "unary_encoding")
#: candidates whose output is an array of domain values; OLH is preferred to them within
#: ``OLH_MARGIN``
ARRAY_OUTPUTS = ("subset_selection", "unary_encoding")
#: OLH is preferred to a less-variance array output up to this ratio (output size, noise words)
OLH_MARGIN = 1.05


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
        if domain_size <= MAX_UNIVERSE:
            variances["unary_encoding"] = vector_variance(unary_oue(epsilon), domain_size, n)
            if optimal_subset_size(domain_size, epsilon) > 1:
                ss = SubsetSelection(domain=range(domain_size), epsilon=epsilon)
                variances["subset_selection"] = vector_variance(ss, domain_size, n)
    return variances


def unary_oue(epsilon: float) -> UnaryEncoding:
    """OUE with one item per record, as the categorical ``unary_encoding`` calibrates it.

    Its ``(p, q)`` do not depend on the domain size ``k >= 2`` (two one-hot
    vectors differ in one bit each way: ``a = b = 1``), so two values stand
    for any ``k``.
    """
    return UnaryEncoding(universe=["0", "1"], max_items=1, epsilon=epsilon)


def least_variance(variances: Mapping[str, float]) -> str:
    """The candidate with the least variance (ties: the earlier one in ``CANDIDATES``).

    An array output (SS, OUE) only wins over an OLH candidate by more than ``OLH_MARGIN``.
    """
    ranked = [name for name in CANDIDATES if name in variances]
    best = min(ranked, key=lambda name: (variances[name], ranked.index(name)))
    olh = variances.get("local_hashing")
    if best in ARRAY_OUTPUTS and olh is not None and olh <= OLH_MARGIN * variances[best]:
        return "local_hashing"
    return best

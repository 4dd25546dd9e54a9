r"""``mechanism: auto`` for categorical fields: the least estimator variance.

The candidates are k-ary randomized response (RR), optimal local hashing
(OLH) and optimized unary encoding (OUE, ``unary_encoding``).

Criterion: the summed variance of the debiased frequency vector, the
expected squared error over the whole domain. Each value's variance given
the data, ``frequency_variance(n, f)``, is linear in its true share ``f``:
``f A + (1 - f) B`` with ``A`` its value at ``f = 1`` and ``B`` at ``f = 0``.
Summed over the ``k`` values, whose shares add up to 1, it is::

    A + (k - 1) B

whatever the true distribution: the criterion is exact for every truth
(so also its worst case). The per-value worst case ``max(A, B)``
(``estimator_variance``) is the wrong criterion here: at large epsilon it
is ``A`` for both RR and OLH, ignores the ``k - 1`` values a record does not
hold, and would pick local hashing at eps = 4 from k = 56 where randomized
response has the smaller error up to k = 165. All terms are
``(something) / n``, so the choice does not depend on ``n``;
``VARIANCE_N`` only scales the numbers ``explain`` shows. It depends on the
domain size ``k`` and ``(epsilon, delta)`` only, never on the domain's
values or their order.

The three, with ``e = e^eps`` and ``V = n (A + (k - 1) B)`` (Wang et al.
2017, Sec. 4-5; each mechanism module derives its ``A`` and ``B``):

* RR, ``p = e / (e + k - 1)``: ``B = (k - 2 + e) / (n (e - 1)^2)``.
* OUE, ``p = 1/2``, ``q = 1 / (e + 1)``: ``A = p (1 - p) / (n (p - q)^2)
  = (e + 1)^2 / (n (e - 1)^2)``, ``B = q (1 - q) / (n (p - q)^2)
  = 4 e / (n (e - 1)^2)``.
* OLH, ``g = round(e) + 1`` buckets, ``p = e / (e + g - 1)``: ``A = p (1 - p)
  / (n (p - 1/g)^2)``, ``B = (1/g)(1 - 1/g) / (n (p - 1/g)^2)``. ``B`` is
  least at the real ``g = e + 1``, where it equals OUE's ``B``: with the
  integer ``g``, OLH's ``B`` is never below OUE's. Its ``A`` is smaller than
  OUE's (its ``p`` is larger than 1/2), so the summed variances of the two
  cross: over eps in (0, 12], OLH's is between 0.95 and 1.0406 times OUE's
  for every ``k >= 3``, the largest gap at eps ~ 0.405, where ``e`` = 1.5 and
  ``g`` rounds from 2.5 down to 2 (at ``k = 2`` up to 1.052, where RR has a
  quarter of either's variance). ``tests/unit/mechanisms/
  test_unary_categorical.py`` scans it.

RR wins iff roughly ``k < 3 e + 2`` (at ``f = 0``; the ``A`` terms and the
integer ``g`` move the boundary slightly; the exact variances decide).

Rule: the least summed variance, except that where OUE has the least and
OLH's is within ``OLH_MARGIN`` (5%) of it, OLH is chosen. OUE costs a
``k``-bit output (a JSON array of the values whose bit is 1: about ``k / (e
+ 1) + 1/2`` values per record) and ``k`` noise words per record, OLH two
numbers and three words; 5% of variance is worth less than that. By the
bound above, OLH is therefore always chosen over OUE where both can run
(the scan checks that no ``(k, eps)`` picks OUE then):
OUE is chosen only where OLH cannot, that is for a domain with integer
values (OLH hashes strings; ``privstream.kinds.auto``), where it wins over
RR from about ``k > 3 e + 2``. Only RR runs when ``delta > 0`` (OLH and OUE
are pure epsilon-DP and would waste the delta); OUE does not run over more
than ``MAX_UNIVERSE`` values (the noise words one record may draw).

Ties (equal variances, to the double) go to the first candidate in
``CANDIDATES`` order, so the choice is a function of (k, epsilon, delta)
(and of which candidates the field allows).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from privstream.mechanisms.local_hashing import OptimalLocalHashing
from privstream.mechanisms.randomized_response import RandomizedResponse
from privstream.mechanisms.unary_encoding import MAX_UNIVERSE, UnaryEncoding


class FrequencyOracle(Protocol):
    """A mechanism with an exact per-value frequency variance (RR, OLH, OUE)."""

    def frequency_variance(self, n: int, frequency: float) -> float: ...


#: the records at which ``explain`` shows the variances (the choice does not depend on it)
VARIANCE_N = 1000
#: candidates in tie-break order
CANDIDATES = ("randomized_response", "local_hashing", "unary_encoding")
#: OLH is preferred to a less-variance OUE up to this ratio (output size and noise words)
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

    OUE only wins over an OLH candidate by more than ``OLH_MARGIN``.
    """
    ranked = [name for name in CANDIDATES if name in variances]
    best = min(ranked, key=lambda name: (variances[name], ranked.index(name)))
    olh = variances.get("local_hashing")
    if best == "unary_encoding" and olh is not None and olh <= OLH_MARGIN * variances[best]:
        return "local_hashing"
    return best

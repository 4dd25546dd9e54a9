r"""Optimized unary encoding (OUE) for categorical fields: one domain value per record.

A record holds one value of a domain of ``k`` values, which is the set
field's unary encoding (``privstream.mechanisms.unary_encoding``) of a set
of exactly one item: the one-hot vector ``b = e_v`` in ``{0,1}^k``, every
bit flipped independently with ``P(1 -> 1) = p = 1/2`` and ``P(0 -> 1) = q
= 1 / (e^eps + 1)`` (Wang et al. 2017, Sec. 4). The sampler, its 64-bit
integer thresholds and its certified (realised) epsilon are the set
field's, with ``max_items = 1``: two one-hot vectors differ in one bit each
way (``a = b = 1`` in ``unary_calibration``), so the per-bit epsilon is the
field's epsilon, and the bound covers every pair of values (one-hots are
admissible sets of at most one item).

Positions: bit ``j`` is the value ``domain[j]``. The kind
(``privstream.kinds.unary``) passes the domain in canonical order (sorted
by canonical JSON text), so the draw that decides a value's bit does not
depend on the order the config lists the domain in; the release is the
JSON array of the values whose bit is 1, in that order.

Error metric: Hamming distance between the released and the true one-hot
vectors (``noise_error``: the ones released outside ``v`` plus 1 if ``v``'s
bit is 0). ``E[rho] = (1 - p) + (k - 1) q = 1/2 + (k - 1) / (e^eps + 1)``.

Lower bound. The inputs are the ``k`` one-hot vectors, pairwise at Hamming
distance 2; the outputs live in the larger space ``{0,1}^k``, where an
output may lie at distance 1 from every input (the zero vector). Theorem
5.5's proof takes disjoint balls of radius ``< kappa / 2`` around the inputs
and counts an error of at least ``kappa`` outside them; in ``{0,1}^k`` an
output outside the ball of radius ``< 1`` around ``e_v`` is at distance at
least 1, so the theorem holds with ``kappa = 1`` (not 2): ``gamma >= (1 -
delta) m / (m + e^eps)``, ``m = k - 1``. Theorem 5.3 (diameter 2) gives
``1 / (1 + e^eps)``, never more. This is randomized response's bound, which
randomized response meets exactly (Example 5.7); OUE's error is about ``k q``
above it, the price of a release built for frequency estimation rather
than for one record (``explain`` shows both views).

Frequency estimation: ``f_hat_v = (c_v / n - q) / (p - q)`` with ``c_v`` the
records whose released array holds ``v`` (``unary_estimation``), its
variance ``(f p (1 - p) + (1 - f) q (1 - q)) / (n (p - q)^2)`` given the
data, at the realised ``(p, q)``.

References
----------
* T. Wang, J. Blocki, N. Li, S. Jha, *Locally differentially private
  protocols for frequency estimation*, USENIX Security 2017, Sec. 4 (OUE).
* M. Jazbec, *Splošna definicija diferencirane zasebnosti*, 2018, Thms. 5.3,
  5.5, Ex. 5.7.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.base import FiniteMechanism, finite_gamma
from privstream.mechanisms.rng import NoiseSource
from privstream.mechanisms.unary_encoding import UnaryEncoding
from privstream.mechanisms.validation import check_domain, check_epsilon


class UnaryCategorical(FiniteMechanism):
    """OUE over a finite domain: domain positions in, ``(n, k)`` bool bit vectors out."""

    name: ClassVar[str] = "unary_encoding"
    metric: ClassVar[str] = "Hamming distance between one-hot and released bit vectors"

    def __init__(self, *, domain: Sequence[Any], epsilon: float) -> None:
        super().__init__(epsilon=check_epsilon(epsilon), delta=0.0)
        self.domain = check_domain(domain)
        # universe names: the values' JSON texts ("7" and 7 stay apart), for audit labels
        texts = [json.dumps(value, ensure_ascii=True) for value in self.domain]
        self.unary = UnaryEncoding(universe=texts, max_items=1, epsilon=self.epsilon)
        #: the realised P(1 -> 1) and P(0 -> 1)
        self.p, self.q = self.unary.p, self.unary.q

    @property
    def realized_epsilon(self) -> float:
        """Certified upper bound on the epsilon of the thresholds used (``<= epsilon``)."""
        return self.unary.realized_epsilon

    @property
    def expected_error(self) -> float:
        return (1.0 - self.p) + (len(self.domain) - 1) * self.q

    @property
    def gamma_lower_bound(self) -> float:
        """Theorem 5.5 with ``kappa = 1`` over the ``k`` one-hot vectors (module docstring)."""
        return finite_gamma(len(self.domain) - 1, self.epsilon, self.delta)

    def frequency_variance(self, n: int, frequency: float) -> float:
        """Exact ``Var[f_hat_v]`` given the data, for a value held by a share ``frequency``."""
        return self.unary.frequency_variance(n, frequency)

    def estimator_variance(self, n: int) -> float:
        return self.unary.estimator_variance(n)

    def params(self) -> dict[str, float | int | str]:
        return {"p": self.p, "q": self.q, "domain_size": len(self.domain)}

    def one_hot(self, positions: NDArray[np.int64]) -> NDArray[np.bool_]:
        """The ``(n, k)`` one-hot vectors of domain positions."""
        indices = np.asarray(positions, dtype=np.int64)
        if indices.ndim != 1 or np.any((indices < 0) | (indices >= len(self.domain))):
            raise MechanismError(
                f"expected a column of domain positions in 0..{len(self.domain) - 1}"
            )
        bits = np.zeros((len(indices), len(self.domain)), dtype=np.bool_)
        bits[np.arange(len(indices)), indices] = True
        return bits

    def release(self, values: NDArray[Any], source: NoiseSource) -> NDArray[np.bool_]:
        """The released bit vectors of a column of domain positions (one ``words`` call)."""
        return self.unary.release(self.one_hot(values), source)

    def noise_error(
        self, inputs: NDArray[Any], outputs: NDArray[Any]
    ) -> NDArray[np.float64] | None:
        """Hamming distance from each input's one-hot vector: a function of the noise alone."""
        indices = np.asarray(inputs, dtype=np.int64)
        bits = np.asarray(outputs, dtype=np.bool_)
        own = bits[np.arange(len(indices)), indices]
        errors: NDArray[np.float64] = (bits.sum(axis=1) - own + ~own).astype(np.float64)
        return errors

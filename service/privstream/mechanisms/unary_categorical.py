"""Optimized unary encoding (OUE) for categorical fields: one domain value per record.

Claim: pure ``eps``-DP (``delta = 0``) for any two values of a ``k``-value
domain, for the thresholds actually used (``realized_epsilon <= epsilon``).

Release: the one-hot vector ``e_v`` in ``{0,1}^k``, every bit flipped with
``P(1 -> 1) = p = 1/2``, ``P(0 -> 1) = q = 1 / (e^eps + 1)`` (Wang et al. 2017,
Sec. 4), released as the JSON array of the values whose bit is 1. Bit ``j`` is
``domain[j]`` in canonical order (``privstream.kinds.unary``), so no draw
depends on the order the config lists the domain in.

Calibration and sampler contract: the set field's
(``privstream.mechanisms.unary_encoding``) with ``max_items = 1``: two one-hots
differ in one bit each way (``a = b = 1`` in ``unary_calibration``), so the
per-bit epsilon is the field's; one 64-bit word per bit, one ``words`` call.

Error ``1/2 + (k - 1) / (e^eps + 1)``; lower bound Theorem 5.5 with ``kappa = 1``,
``(1 - delta) (k - 1) / (k - 1 + e^eps)``; frequencies by ``unary_estimation``.

Proof, step by step, with the function each step proves:
docs/proofs/unary-categorical.md.
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
        """Theorem 5.5 with ``kappa = 1`` over the ``k`` one-hot vectors (proof page)."""
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

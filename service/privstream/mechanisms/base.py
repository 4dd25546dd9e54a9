"""The small base class every mechanism builds on.

A mechanism object *carries its guarantee*: its calibrated parameters, the
(epsilon, delta) it satisfies for one value, the expected error it adds in
its field's metric, and the gamma lower bound that no (epsilon, delta)-DP
mechanism on the same domain can beat (thesis Theorems 5.3 and 5.5).
``explain``, the metrics and the audit all read these from here.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from decimal import Context, Decimal
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.rng import NoiseSource
from privstream.mechanisms.variance_law import VarianceLaw


@dataclass(frozen=True)
class CanaryLaw:
    """What the canary statistics of a mechanism are, exactly, at a fixed set of inputs.

    ``error`` is ``E`` of the mean ``noise_error`` over the inputs;
    ``second_moment``, where known, a bound on ``mean E (y - d)^2`` (the
    alert rules' standard errors). A mechanism that releases an unbiased
    scalar also gives ``bias``, a bound on ``|E mean(y - d)|``, for the signed
    statistic: a sampler that leans one way moves it, where the mean
    ``|y - d|`` over inputs on both sides barely changes.
    """

    error: float
    bias: float | None = None
    second_moment: float | None = None


class Mechanism(ABC):
    """A 1-D (epsilon, delta)-DP randomized response for one field value."""

    #: short name used in config, explain and metric labels
    name: ClassVar[str]
    #: the metric rho in which errors and lower bounds are stated
    metric: ClassVar[str]

    def __init__(self, *, epsilon: float, delta: float) -> None:
        self.epsilon = epsilon
        self.delta = delta

    @property
    @abstractmethod
    def expected_error(self) -> float:
        """Worst-case expected error ``max_d E[rho(Y_d, d)]`` of this mechanism."""

    @property
    @abstractmethod
    def gamma_lower_bound(self) -> float:
        """Smallest worst-case expected error any (eps, delta)-DP mechanism can have."""

    @abstractmethod
    def params(self) -> dict[str, float | int | str]:
        """The calibrated parameters, for ``explain`` and audit logs."""

    @abstractmethod
    def estimator_variance(self, n: int) -> float:
        """Variance the noise adds to the analyst's unbiased estimate from ``n`` records.

        Numeric kinds: of the mean. Frequency kinds: of one value's frequency,
        worst case over its true frequency. Conditional on the raw data.
        """

    @abstractmethod
    def release(self, values: NDArray[Any], source: NoiseSource) -> NDArray[Any]:
        """Sanitize a whole column; calls ``source.words`` exactly once."""

    def variance_law(self) -> VarianceLaw | None:
        """``Var[y | t]`` for the value ``t`` rescaled to ``[-1, 1]`` (``VarianceLaw``).

        What ``mechanism: auto`` ranks the mean-oriented candidates by (their
        regret over every data spread). None where the mechanism releases no
        unbiased scalar (finite domains, sets, vectors).
        """
        return None

    def noise_error(
        self, inputs: NDArray[Any], outputs: NDArray[Any]
    ) -> NDArray[np.float64] | None:
        """``rho`` between each output and this mechanism's own input, clamped and on its grid.

        That is the noise alone: where the raw value lies inside the bounds
        does not enter, so an aggregate of these errors tells nothing about
        the data beyond how many values were clamped (reported separately).
        Its mean estimates ``expected_error`` up to the grid rounding the
        worst case adds. None where no such function of the noise exists
        (sets: the error depends on the set's size; hashed reports).
        """
        return None

    def canary_law(self, inputs: NDArray[Any]) -> CanaryLaw:
        """The canary statistics' expectations at ``inputs`` (``privstream.pipeline.canary``).

        Here the error's law is the same at every input (or the canaries sit
        where ``expected_error`` is taken), so the mean error's expectation is
        ``expected_error``; mechanisms whose error depends on the input override it.
        """
        return CanaryLaw(self.expected_error)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}(epsilon={self.epsilon}, delta={self.delta}, {shown})"


class FiniteMechanism(Mechanism):
    """A mechanism on a finite domain: domain positions ``0..len(domain)-1`` in and out."""

    #: the domain values, in the order their positions index
    domain: tuple[Any, ...]


def require_finite(values: Any, name: str) -> NDArray[np.float64]:
    """The column as float64, or MechanismError if it holds NaN or an infinity.

    The pipeline dead-letters non-finite values before they reach a
    mechanism; this is the mechanism's own check (NaN never clamps: it would
    pass ``clip`` and turn into an arbitrary int64 grid index).
    """
    column = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(column)):
        raise MechanismError(f"{name}: the column holds a value that is not finite")
    return column


def unused_words(n: int) -> NDArray[np.uint64]:
    """An empty draw, for mechanisms that need no randomness (zero sensitivity)."""
    return np.empty((n, 0), dtype=np.uint64)


def exp_neg(epsilon: float) -> float:
    """``e^-epsilon`` without overflow; formulas are written in this form."""
    return math.exp(-epsilon)


#: 2**64: probabilities realised by comparing a whole 64-bit word with an integer threshold
TWO_64 = 1 << 64
_EXACT = Context(prec=60)
#: beyond this, e^eps is far above anything a 2**-64 threshold resolves
_EXP_CAP = 300.0


def exp_lower_bound(x: float) -> Fraction:
    """A rational ``E <= e^x`` (within ``10^-50`` relative for ``x <= 300``).

    ``decimal``'s ``exp`` is correctly rounded at 60 digits; one unit of the
    50th digit more than covers that rounding. For ``x > 300``, ``e^300 <= e^x``.
    """
    value = _EXACT.exp(Decimal(min(x, _EXP_CAP)))
    return Fraction(value) * (1 - Fraction(1, 10**50))


def log_upper_bound(ratio: Fraction) -> float:
    """A float ``>= ln(ratio)`` for a positive rational (60-digit ``decimal``, rounded up)."""
    quotient = _EXACT.divide(Decimal(ratio.numerator), Decimal(ratio.denominator))
    value = float(_EXACT.ln(quotient))
    return value + abs(value) * 2.0**-50 + 1e-300


def compact_gamma(diameter: float, epsilon: float, delta: float) -> float:
    """Theorem 5.3, compact domain: ``gamma >= (1 - delta) diam / (2 (1 + e^eps))``."""
    e = exp_neg(epsilon)
    return (1.0 - delta) * diameter * e / (2.0 * (e + 1.0))


def finite_gamma(m: float, epsilon: float, delta: float) -> float:
    """Theorem 5.5, ``m + 1`` points at distance >= 1: ``(1 - delta) m / (m + e^eps)``."""
    e = exp_neg(epsilon)
    return (1.0 - delta) * m * e / (m * e + 1.0)

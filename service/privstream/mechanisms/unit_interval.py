"""The base of the mechanisms on a bounded real mapped to ``t`` in ``[-1, 1]``.

Piecewise and hybrid (and Duchi's, inside hybrid) clamp a field value ``x``
into ``[lo, hi]``, map it to ``t = (x - mid) / half`` and report
``mid + half y`` for a report ``y`` of ``t``. This class holds that mapping,
the release, the reach check (every report a finite double), the error and
variance accounting over ``t``, and the canary law; each mechanism gives
its sampler and its law (``privstream.mechanisms.piecewise`` and
``hybrid``).
"""

from __future__ import annotations

import functools
import math
from abc import abstractmethod
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms.base import CanaryLaw, Mechanism, compact_gamma, require_finite
from privstream.mechanisms.rng import NoiseSource, Words
from privstream.mechanisms.validation import check_bounds, check_delta, check_epsilon
from privstream.mechanisms.variance_law import VarianceLaw

#: ``t`` values at which ``max_t E|y - t|`` is evaluated
ERROR_POINTS = 129


class UnitIntervalMechanism(Mechanism):
    """A real field mapped to ``t`` in ``[-1, 1]``, reported on ``mid + half y``."""

    metric: ClassVar[str] = "absolute difference |y - d|"
    #: words read per value
    words_per_value: ClassVar[int]

    def __init__(self, *, bounds: tuple[float, float], epsilon: float, delta: float = 0.0) -> None:
        super().__init__(epsilon=check_epsilon(epsilon), delta=check_delta(delta))
        self.lower, self.upper = check_bounds(bounds)
        self.diameter = self.upper - self.lower
        self.middle = self.lower / 2.0 + self.upper / 2.0
        self.half = self.diameter / 2.0

    @property
    @abstractmethod
    def unit_variance(self) -> float:
        """Upper bound on ``max_t Var[y | t]`` in ``t`` units."""

    @property
    @abstractmethod
    def reach(self) -> float:
        """The largest ``|y|`` any report can have (``t`` units)."""

    @abstractmethod
    def variance_law(self) -> VarianceLaw:
        """``Var[y | t]`` bounded by the law (rounded up; ``t`` units)."""

    @abstractmethod
    def unit_bias(self) -> float:
        """Upper bound on ``|E[y | t] - t|`` in ``t`` units."""

    @abstractmethod
    def unit_errors(self, t: NDArray[np.float64]) -> NDArray[np.float64]:
        """``E|y - t|`` of the implemented law at each ``t`` (``t`` units)."""

    @functools.cached_property
    def _worst_error(self) -> tuple[float, float]:
        """``(half max_t E|y - t|, the t where it is taken)`` over ``error_points``.

        Computed on first use: a table of 129 x 4096 distances (about 10 ms) that
        building the mechanism only to compare it (``mechanism: auto``) never needs.
        """
        points = error_points()
        errors = self.unit_errors(points)
        return self.half * float(errors.max()), float(points[int(np.argmax(errors))])

    @property
    def worst_t(self) -> float:
        """The ``t`` at which ``expected_error`` is taken."""
        return self._worst_error[1]

    @property
    def expected_error(self) -> float:
        return self._worst_error[0] if self.diameter > 0 else 0.0

    @abstractmethod
    def sample(self, t: NDArray[np.float64], words: Words) -> NDArray[np.float64]:
        """Reports ``y`` for ``t`` from ``words_per_value`` words per row."""

    def check_reach(self) -> None:
        """MechanismError unless every report ``mid + half y`` is a finite double."""
        if not math.isfinite(self.half * self.reach + abs(self.middle)):
            raise MechanismError(
                f"{self.name}: bounds [{self.lower:g}, {self.upper:g}] at epsilon "
                f"{self.epsilon:g} give reports beyond the double range (|y| up to "
                f"{self.reach:.3g} half-widths); express the field in a larger unit or use laplace"
            )

    @property
    def gamma_lower_bound(self) -> float:
        return compact_gamma(self.diameter, self.epsilon, self.delta)

    def estimator_variance(self, n: int) -> float:
        return self.half * self.half * self.unit_variance / n  # inf, not OverflowError

    def bias_bound(self) -> float:
        """``|E[release] - clamped value|``: sampler bias and the float mapping of ``t``."""
        return self.half * (self.unit_bias() + 2.0**-50) if self.diameter > 0 else 0.0

    def clamp(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.clip(values, self.lower, self.upper)

    def to_unit(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """``t = (clamp(x) - mid) / half``, clipped against float rounding."""
        return np.clip((self.clamp(values) - self.middle) / self.half, -1.0, 1.0)

    def release(self, values: NDArray[np.float64], source: NoiseSource) -> NDArray[np.float64]:
        """Sanitize a column of finite raw values (``lo == hi``: ``lo``, without noise)."""
        column = require_finite(values, self.name)
        if self.diameter == 0.0:
            return np.full(len(column), self.lower)
        words = source.words(len(column), self.words_per_value)
        return self.middle + self.half * self.sample(self.to_unit(column), words)

    def canary_law(self, inputs: NDArray[np.float64]) -> CanaryLaw:
        """Exact expectations of the canary statistics at ``inputs`` (inside the bounds).

        The error of these reports depends on the input (``E|y - t|`` grows
        towards the bounds), so the canaries are spread over the bounds and
        their mean error is judged against the mean of ``unit_errors`` at
        exactly those inputs, not against the worst case. The signed error
        ``y - d`` has mean within ``bias_bound`` of 0, and ``E (y - d)^2`` is
        ``Var[y | t] + bias^2`` (the variance law bounds the first term).
        """
        t = self.to_unit(np.asarray(inputs, dtype=np.float64))
        law = self.variance_law()
        variance = float(np.mean(law.square * t * t + law.absolute * np.abs(t) + law.constant))
        bias = self.bias_bound()
        return CanaryLaw(
            error=self.half * float(np.mean(self.unit_errors(t))) if self.diameter > 0 else 0.0,
            bias=bias,
            second_moment=self.half * self.half * variance + bias * bias,
        )

    def noise_error(
        self, inputs: NDArray[np.float64], outputs: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """``|y - clamp(d)|``: the report's distance from the mechanism's own input.

        Unlike Laplace's, its law depends on where ``d`` lies (``E|y - t|`` grows
        towards the bounds); the exported error metrics come from the fixed canary
        inputs only (``privstream.pipeline.canary``), never from released values.
        """
        clamped = self.clamp(np.asarray(inputs, dtype=np.float64))
        return np.abs(np.asarray(outputs, dtype=np.float64) - clamped)


def error_points() -> NDArray[np.float64]:
    """The ``t`` values at which the worst expected error is taken (both ends included)."""
    return np.linspace(-1.0, 1.0, ERROR_POINTS)

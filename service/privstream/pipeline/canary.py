"""Shadow draws: each noised field's mechanism run on canary inputs, for the error metrics.

The error ``rho(Y, d)`` of a *released* value must not be exported: it is
``|y - x|`` (or whether ``y != x``), and ``y`` is public, so anyone who reads
both the sanitized topic and ``/metrics`` gets ``x`` back from the error of a
batch of one (and one exact constraint per batch otherwise). Instead, the
worker runs every measurable field's handler, through the same ``release``
as the real column, on ``count`` canary inputs that are a fixed function of
the plan (spread over the field's bounds or domain), with noise from a source
of their own, and exports only the canary errors.

Those errors are a function of the canary noise alone. The worker draws it
from the kernel CSPRNG (``OsEntropy``), fresh for every round: canary outputs
are never released, so they need no replay stability, and fresh words are
independent of every released draw (which come from keyed AES streams) and
of every raw value. The exported error metrics are therefore independent of
the data and of the released outputs: the red-team test
(``tests/integration/test_metrics_redteam.py``) checks that an attacker who
reads both does no better than chance. They still catch what they are for: a
mis-calibrated or broken sampler in a mechanism object shows in its canary
errors just as in its real ones. (A fault confined to the keyed word source,
which canaries do not use, is the business of the ``rng`` tests and the
audit.)

Each field's canaries come with their law (``Mechanism.canary_law``): the
exact expectation of the mean error at those inputs, which the alerts compare
with (the bounded-real mechanisms' error differs from input to input), and,
for mechanisms with unbiased reports, the signed errors ``y - d``, whose mean
a sampler that leans one way moves although the mean ``|y - d|`` over inputs
on both sides of the middle hardly changes.

A field is measured when its mechanism has an error function of the noise
alone (``Mechanism.noise_error``): real, integer, categorical, boolean and
vector fields. Memoized fields are measured too (the canaries exercise the
same mechanism object; their real noise follows the value). Sets, hashed
categoricals and functional fields are not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MisuseError
from privstream.mechanisms import Mechanism, NoiseSource
from privstream.mechanisms.base import CanaryLaw
from privstream.pipeline.handlers import FieldHandler
from privstream.pipeline.plan import RecordPlan

#: default canaries per measured field per round (docs/metrics.md, "Error versus the gamma bound")
DEFAULT_COUNT = 32


def _spread(lower: float, upper: float, count: int) -> NDArray[np.float64]:
    return np.linspace(lower, upper, count)


def real_inputs(handler: Any, count: int) -> NDArray[Any]:
    lower, upper = handler.bounds
    return _spread(lower, upper, count)


def worst_case_inputs(handler: Any, count: int) -> NDArray[Any]:
    """The mechanism's own canary inputs (``SquareWaveMechanism.worst_inputs``)."""
    inputs: NDArray[Any] = handler.mechanism.worst_inputs(count)
    return inputs


def integer_inputs(handler: Any, count: int) -> NDArray[Any]:
    mech = handler.mechanism
    return np.rint(_spread(mech.lower, mech.upper, count)).astype(np.int64)


def categorical_inputs(handler: Any, count: int) -> NDArray[Any]:
    return np.arange(count, dtype=np.int64) % len(handler.mechanism.domain)


def boolean_inputs(handler: Any, count: int) -> NDArray[Any]:
    return np.arange(count, dtype=np.int64) % 2


def vector_inputs(handler: Any, count: int) -> NDArray[Any]:
    """Row ``i``: ``t_i e_(i mod k)`` with ``t`` spread over ``[-r, r]``, inside the ball."""
    k = handler.dimension
    radius = float(getattr(handler.mechanism, "l2_bound", 1.0))
    rows = np.zeros((count, k))
    rows[np.arange(count), np.arange(count) % k] = _spread(-radius, radius, count)
    return rows


#: (handler, count) -> ``count`` parsed canary inputs spread over the field's domain
CanaryInputs = Callable[[Any, int], NDArray[Any]]


def measurable(mechanism: Mechanism | None) -> bool:
    """Whether the mechanism has an error that is a function of its noise alone."""
    return mechanism is not None and type(mechanism).noise_error is not Mechanism.noise_error


@dataclass(frozen=True)
class _Canary:
    handler: FieldHandler
    #: parsed values, as ``parse`` would give them (a list, like a real column)
    inputs: list[Any]
    #: the exact expectations of the statistics at these inputs
    law: CanaryLaw


@dataclass(frozen=True)
class CanaryRound:
    """One round of shadow draws, by field name."""

    #: ``rho(y, d)`` of each canary
    errors: dict[str, NDArray[np.float64]]
    #: ``y - d`` of each canary, for the fields whose law has a signed statistic
    signed: dict[str, NDArray[np.float64]]


class Canaries:
    """The canary inputs of a plan's measurable fields, ``count`` per field (deterministic)."""

    def __init__(self, plan: RecordPlan, *, count: int = DEFAULT_COUNT) -> None:
        if count < 1:
            raise MisuseError(f"canary count {count} must be >= 1")
        self.count = count
        self._canaries: list[_Canary] = []
        for planned in plan.fields:
            build, handler = planned.codec.canary, planned.handler
            mech = handler.mechanism
            if build is not None and mech is not None and measurable(mech):
                inputs = build(handler, count)
                self._canaries.append(_Canary(handler, inputs.tolist(), mech.canary_law(inputs)))

    @property
    def fields(self) -> tuple[str, ...]:
        """The measured fields, in plan order."""
        return tuple(c.handler.name for c in self._canaries)

    @property
    def laws(self) -> dict[str, CanaryLaw]:
        """The measured fields' canary laws (what the statistics' expectations are)."""
        return {c.handler.name: c.law for c in self._canaries}

    def draw(self, source: NoiseSource) -> CanaryRound:
        """One shadow release per measured field: its ``count`` canary errors.

        ``source`` must be independent of every released draw (the worker
        passes a fresh ``OsEntropy``); each field calls ``words`` once, as a
        real release does. The signed errors ``y - d`` need no clamping: the
        canary inputs lie inside the bounds.
        """
        drawn = CanaryRound({}, {})
        for canary in self._canaries:
            name, column = canary.handler.name, canary.handler.release(canary.inputs, source)
            if column.error is not None:
                drawn.errors[name] = column.error
            if canary.law.bias is not None:
                drawn.signed[name] = np.asarray(column.values, np.float64) - canary.inputs
        return drawn

"""Each field kind's audit target (``FieldKind.audit_target``), imported on first use.

The registrations (``privstream.kinds``) name these through
``privstream.lazy.deferred``: ``sanitize`` and ``run`` never load
``privstream.audit``. Each function takes the field's handler.
"""

from __future__ import annotations

import json
from typing import Any

from privstream.audit.targets import (
    FiniteTarget,
    HashedTarget,
    IntegerTarget,
    RealTarget,
    SetTarget,
    Target,
    functional_target,
    spread_codes,
    vector_target,
)
from privstream.mechanisms.unary_categorical import UnaryCategorical


def real_target(handler: Any) -> Target:
    return RealTarget(handler.name, handler.mechanism, handler.bounds)


def integer_target(handler: Any) -> Target:
    mech = handler.mechanism
    return IntegerTarget(handler.name, mech, (mech.lower, mech.upper))


def domain_target(handler: Any) -> Target:
    """Categorical fields: values spread over the domain (an ordinal's ends, the worst pair,
    among them)."""
    return FiniteTarget(
        handler.name, handler.mechanism, spread_codes(len(handler.mechanism.domain))
    )


def boolean_target(handler: Any) -> Target:
    return FiniteTarget(handler.name, handler.mechanism, (0, 1))


def hashed_target(handler: Any) -> Target:
    return HashedTarget(handler.name, handler.mechanism, handler.domain)


def set_target(handler: Any) -> Target:
    return SetTarget(handler.name, handler.mechanism)


def vector_field_target(handler: Any) -> Target:
    return vector_target(handler.name, handler.mechanism)


def functional_field_target(handler: Any) -> Target:
    return functional_target(handler.name, handler.mechanism)


class UnaryCategoricalTarget(SetTarget):
    """The set field's audit with one-value inputs: the two first values of the domain."""

    def __init__(self, name: str, mechanism: UnaryCategorical) -> None:
        super().__init__(name, mechanism.unary)
        self.mechanism = mechanism
        self.domain = mechanism.domain

    @property
    def inputs(self) -> tuple[Any, ...]:
        return (self.domain[self.first[0]], self.domain[self.second[0]])

    def input_label(self, index: int) -> str:
        return f"{self.name}={self.universe[self.touched[index]]}"

    def convert(self, values: list[Any]) -> Any:
        # the bit names are the values' JSON texts (``UnaryCategorical``)
        return super().convert([[json.dumps(v, ensure_ascii=True) for v in row] for row in values])


def unary_categorical_target(handler: Any) -> Target:
    return UnaryCategoricalTarget(handler.name, handler.mechanism)

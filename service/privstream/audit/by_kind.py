"""Each field kind's audit target and width, keyed like its registration.

``TARGETS`` maps a registration's (kind, mechanism) to a function of the
field's handler giving its worst-case inputs and test sets; ``WIDTHS`` how
many noise words and output numbers one record of it costs (3 unless
listed). The table is checked against the registry when this module loads
(``privstream.kinds.check_table``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
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
from privstream.audit.timestamps import TimestampTarget
from privstream.errors import AuditError
from privstream.kinds import check_table
from privstream.mechanisms.unary_categorical import UnaryCategorical
from privstream.pipeline.plan import PlannedField


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


#: (kind, mechanism) of a registration -> its audit target
TARGETS: dict[tuple[str, str | None], Callable[[Any], Target]] = {
    ("real", "laplace"): real_target,
    ("real", "gaussian"): real_target,
    ("real", "piecewise"): real_target,
    ("real", "hybrid"): real_target,
    ("real", "duchi"): real_target,
    ("real", "pm_sub"): real_target,
    ("integer", "discrete_laplace"): integer_target,
    ("categorical", "randomized_response"): domain_target,
    ("boolean", "randomized_response"): boolean_target,
    ("categorical", "exponential"): domain_target,
    ("categorical", "local_hashing"): hashed_target,
    ("categorical", "unary_encoding"): unary_categorical_target,
    ("set", "unary_encoding"): set_target,
    ("vector", "gaussian"): vector_field_target,
    ("functional", "gaussian_process"): functional_field_target,
    ("timestamp", "discrete_laplace"): TimestampTarget,
}
check_table("privstream.audit.by_kind", TARGETS)

#: handler -> noise words and output numbers per record, where not 3
WIDTHS: dict[tuple[str, str | None], Callable[[Any], int]] = {
    ("real", "piecewise"): lambda h: h.mechanism.words_per_value + 1,  # words, and one output
    ("real", "hybrid"): lambda h: h.mechanism.words_per_value + 1,
    ("real", "duchi"): lambda h: h.mechanism.words_per_value + 1,
    ("real", "pm_sub"): lambda h: h.mechanism.words_per_value + 1,
    ("categorical", "unary_encoding"): lambda h: len(h.mechanism.domain),
    ("set", "unary_encoding"): lambda h: int(h.mechanism.universe_size),
    ("vector", "gaussian"): lambda h: 3 * int(h.mechanism.dimension),
    ("functional", "gaussian_process"): lambda h: 3 * int(h.mechanism.dimension),
}


def target_for(planned: PlannedField) -> Target:
    """The audit's view of one released field with a mechanism (its kind's audit target)."""
    make = TARGETS.get((planned.kind, planned.mechanism))
    if planned.handler.mechanism is None or make is None:
        raise AuditError(f"field {planned.name!r}: released as is, nothing to audit")
    return make(planned.handler)


def audit_width(planned: PlannedField) -> int:
    """Roughly how many noise words and output numbers one record of this field costs."""
    width = WIDTHS.get((planned.kind, planned.mechanism))
    return 3 if width is None else width(planned.handler)

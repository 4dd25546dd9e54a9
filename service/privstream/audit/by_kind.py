"""Each field kind's audit target and width, keyed like its registration.

``TARGETS`` maps a registration's (kind, mechanism) to a function of the
field's handler giving its worst-case inputs and test sets; ``WIDTHS`` how
many noise words and output numbers one record of it costs (3 unless
listed). The table is checked against the registry when this module loads
(``privstream.kinds.check_table``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from privstream.audit.events import BitPattern, Event, Sample
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
from privstream.mechanisms.subset_selection import SubsetSelection
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


class SubsetTarget(Target):
    """Subset selection: the first and last domain values (canonical order) as inputs.

    The column keeps one bit per watched value: the two inputs ``a``, ``b``
    and, for ``k >= 3``, a middle value ``c`` held by neither. Every output
    holding ``a`` but not ``b`` has the ratio ``e^eps`` (the binding case), so
    the events are every pattern of the watched bits (``{a in S, b not in S}``
    among them) and each bit alone.
    """

    def __init__(self, name: str, mechanism: SubsetSelection) -> None:
        super().__init__(name, mechanism)
        self.domain = mechanism.domain
        k = len(self.domain)
        self.watched = (0, k - 1) if k < 3 else (0, k - 1, k // 2)
        self._column = {
            (type(self.domain[j]), self.domain[j]): c for c, j in enumerate(self.watched)
        }

    @property
    def inputs(self) -> tuple[Any, ...]:
        return (self.domain[self.watched[0]], self.domain[self.watched[1]])

    def convert(self, values: list[Any]) -> NDArray[Any]:
        bits = np.zeros((len(values), len(self.watched)), dtype=np.bool_)
        for row, items in enumerate(values):
            for item in items:
                column = self._column.get((type(item), item))
                if column is not None:
                    bits[row, column] = True
        return bits

    def events(self, pilot: Sequence[Sample] | None, audited: Sequence[int]) -> list[Event]:
        names = [json.dumps(self.domain[j], ensure_ascii=True) for j in self.watched]
        columns = tuple(range(len(self.watched)))
        events: list[Event] = []
        for c, value in enumerate(names):
            for held in (True, False):
                text = f"{value} {'in' if held else 'not in'} {self.name}"
                events.append(BitPattern(self.name, (c,), (held,), False, text))
        for pattern in itertools.product((True, False), repeat=len(columns)):
            shown = ", ".join(
                f"{v}{'' if held else ' not'} in" for v, held in zip(names, pattern, strict=True)
            )
            events.append(BitPattern(self.name, columns, pattern, False, f"{shown} {self.name}"))
        return events


def subset_target(handler: Any) -> Target:
    return SubsetTarget(handler.name, handler.mechanism)


#: (kind, mechanism) of a registration -> its audit target
TARGETS: dict[tuple[str, str | None], Callable[[Any], Target]] = {
    ("real", "laplace"): real_target,
    ("real", "gaussian"): real_target,
    ("real", "piecewise"): real_target,
    ("real", "hybrid"): real_target,
    ("real", "duchi"): real_target,
    ("real", "pm_sub"): real_target,
    ("real", "three_outputs"): real_target,
    ("integer", "piecewise"): real_target,
    ("integer", "hybrid"): real_target,
    ("integer", "duchi"): real_target,
    ("integer", "pm_sub"): real_target,
    ("integer", "three_outputs"): real_target,
    ("real", "square_wave"): real_target,
    ("integer", "discrete_laplace"): integer_target,
    ("categorical", "randomized_response"): domain_target,
    ("boolean", "randomized_response"): boolean_target,
    ("categorical", "exponential"): domain_target,
    ("categorical", "local_hashing"): hashed_target,
    ("categorical", "unary_encoding"): unary_categorical_target,
    ("categorical", "subset_selection"): subset_target,
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
    ("real", "three_outputs"): lambda h: h.mechanism.words_per_value + 1,
    ("integer", "piecewise"): lambda h: h.mechanism.words_per_value + 1,
    ("integer", "hybrid"): lambda h: h.mechanism.words_per_value + 1,
    ("integer", "duchi"): lambda h: h.mechanism.words_per_value + 1,
    ("integer", "pm_sub"): lambda h: h.mechanism.words_per_value + 1,
    ("integer", "three_outputs"): lambda h: h.mechanism.words_per_value + 1,
    ("real", "square_wave"): lambda h: h.mechanism.words_per_value + 1,
    ("categorical", "unary_encoding"): lambda h: len(h.mechanism.domain),
    ("categorical", "subset_selection"): lambda h: h.mechanism.words_per_value,
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

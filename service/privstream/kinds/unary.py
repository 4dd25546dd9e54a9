"""Registration of ``categorical`` with ``mechanism: unary_encoding`` (OUE, one value per record).

The field parses like any categorical (a domain value to its position),
but in the domain's *canonical* order (sorted by canonical JSON text),
memoized or not: bit ``j`` of the released vector is always the same value,
whatever order the config lists the domain in. The release is the JSON
array of the domain values whose noisy bit is 1, in that canonical order
(what a ``set`` field emits for its universe), estimated by the set
field's inversion ``(c/n - q) / (p - q)``
(``privstream.mechanisms.unary_categorical``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privstream.audit.targets import SetTarget
from privstream.config import Guarantee
from privstream.config.fields import CategoricalField
from privstream.estimate.frequency import UnaryCategoryCounts
from privstream.kinds.base import FieldKind, MemoSupport, calibrated, describe, mechanism_domain
from privstream.mechanisms.rng import NoiseSource
from privstream.mechanisms.unary_categorical import UnaryCategorical
from privstream.pipeline import canary, columns, encode
from privstream.pipeline.handlers import CategoricalHandler, Column
from privstream.pipeline.plan import canonical_json


@dataclass(frozen=True)
class UnaryCategoricalHandler(CategoricalHandler):
    """A domain value in, the array of domain values whose noisy bit is 1 out."""

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        indices = np.asarray(values, dtype=np.int64)
        bits = self.mechanism.release(indices, source)
        domain = self.mechanism.domain
        rows, cols = np.nonzero(bits)  # row-major: each row's values in domain order
        picked = list(map(domain.__getitem__, cols.tolist()))
        ends = np.cumsum(np.bincount(rows, minlength=len(indices))).tolist()
        starts = [0, *ends[:-1]]
        return Column(
            [picked[a:b] for a, b in zip(starts, ends, strict=True)],
            self.mechanism.noise_error(indices, bits),
        )


def _unary(spec: CategoricalField, share: Guarantee | None) -> UnaryCategoricalHandler:
    eps, _ = calibrated("categorical (unary_encoding)", share)
    if spec.domain is None:  # the config model requires it
        raise AssertionError("unary_encoding without a domain")  # pragma: no cover
    domain = tuple(sorted(spec.domain, key=canonical_json))
    return UnaryCategoricalHandler(
        spec.name, UnaryCategorical(domain=domain, epsilon=eps), spec.unknown_as
    )


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


UNARY = FieldKind(
    kind="categorical",
    mechanism="unary_encoding",
    model=CategoricalField,
    build=_unary,
    column=columns.categorical_column,
    texts=lambda handler, values: encode.column_texts(values),
    memo_style=lambda handler: None if handler.unknown_as is None else "str",
    # the token holds the value; the scope holds the domain in canonical order
    memo=MemoSupport(domain=mechanism_domain),
    estimator=lambda h, kind, options: UnaryCategoryCounts(h.name, kind, h.mechanism),
    audit_target=lambda h: UnaryCategoricalTarget(h.name, h.mechanism),
    audit_width=lambda h: len(h.mechanism.domain),
    explain=describe,
    canary=canary.categorical_inputs,
)

REGISTRATIONS = (UNARY,)

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

from typing import TYPE_CHECKING

from privstream.config import Guarantee
from privstream.config.fields import CategoricalField
from privstream.kinds.base import (
    FieldKind,
    MemoSupport,
    calibrated,
    describe,
    mechanism_domain,
)
from privstream.pipeline import canary, columns, encode
from privstream.pipeline.plan import canonical_json

if TYPE_CHECKING:
    from privstream.pipeline.structured import UnaryCategoricalHandler


def _unary(spec: CategoricalField, share: Guarantee | None) -> UnaryCategoricalHandler:
    from privstream.mechanisms.unary_categorical import UnaryCategorical
    from privstream.pipeline.structured import UnaryCategoricalHandler

    eps, _ = calibrated("categorical (unary_encoding)", share)
    if spec.domain is None:  # the config model requires it
        raise AssertionError("unary_encoding without a domain")  # pragma: no cover
    domain = tuple(sorted(spec.domain, key=canonical_json))
    return UnaryCategoricalHandler(
        spec.name, UnaryCategorical(domain=domain, epsilon=eps), spec.unknown_as
    )


UNARY = FieldKind(
    kind="categorical",
    mechanism="unary_encoding",
    model=CategoricalField,
    build=_unary,
    column=columns.categorical_column,
    texts=lambda handler, values: encode.column_texts(values),
    # the token holds the value; the scope holds the domain in canonical order
    memo=MemoSupport(domain=mechanism_domain),
    explain=describe,
    canary=canary.categorical_inputs,
)

REGISTRATIONS = (UNARY,)

"""Registration of ordinal categories: ``categorical`` with ``mechanism: exponential``.

The field parses like any categorical (a domain value to its position, in
the *declared* order, which is the order the utility ``-|i - j|`` reads:
it is never sorted, memoized or not), releases through
``OrdinalExponential`` and is estimated by inverting its transition matrix
(``privstream.mechanisms.exponential``).
"""

from __future__ import annotations

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
from privstream.pipeline.handlers import CategoricalHandler


def _ordinal(spec: CategoricalField, share: Guarantee | None) -> CategoricalHandler:
    from privstream.mechanisms.exponential import OrdinalExponential

    eps, _ = calibrated("categorical (exponential)", share)
    if spec.domain is None:  # the config model requires it
        raise AssertionError("exponential without a domain")  # pragma: no cover
    return CategoricalHandler(
        spec.name, OrdinalExponential(domain=spec.domain, epsilon=eps), spec.unknown_as
    )


ORDINAL = FieldKind(
    kind="categorical",
    mechanism="exponential",
    model=CategoricalField,
    build=_ordinal,
    column=columns.categorical_column,
    texts=lambda handler, values: encode.domain_texts(handler.mechanism.domain, values),
    # the token holds the value; the scope holds the domain in its declared order
    memo=MemoSupport(domain=mechanism_domain),
    # the ends are the worst pair (P(0|0) / P(0|m) is the largest ratio); spread keeps both
    explain=describe,
    canary=canary.categorical_inputs,
)

REGISTRATIONS = (ORDINAL,)

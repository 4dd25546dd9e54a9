"""Registrations of the finite-domain kinds: categorical and boolean (randomized response).

Their ``parse`` gives a domain *position*; the memo token is built from the
domain value at that position (``MemoSupport.domain``), never the position,
so reordering a memoized domain cannot change a device's answers.
"""

from __future__ import annotations

from privstream.config import Guarantee
from privstream.config.fields import BooleanField, CategoricalField
from privstream.kinds.base import (
    FieldKind,
    MemoSupport,
    calibrated,
    describe,
    mechanism_domain,
)
from privstream.mechanisms import RandomizedResponse
from privstream.pipeline import canary, columns, encode
from privstream.pipeline.handlers import BooleanHandler, CategoricalHandler
from privstream.pipeline.plan import canonical_json


def _categorical(spec: CategoricalField, share: Guarantee | None) -> CategoricalHandler:
    eps, dlt = calibrated("categorical (randomized_response)", share)
    if spec.domain is None:  # the config model requires it; a registry bug otherwise
        raise AssertionError("randomized_response without a domain")  # pragma: no cover
    # memoized: canonical order, so that reordering the domain keeps every answer
    memoized = spec.memoize_by is not None or spec.memo_identity is not None
    domain = tuple(sorted(spec.domain, key=canonical_json)) if memoized else spec.domain
    rr = RandomizedResponse(domain=domain, epsilon=eps, delta=dlt)
    return CategoricalHandler(spec.name, rr, spec.unknown_as)


CATEGORICAL = FieldKind(
    kind="categorical",
    mechanism="randomized_response",
    model=CategoricalField,
    build=_categorical,
    column=columns.categorical_column,
    # domain values (strings and integers, no bools), each encoded once
    texts=lambda handler, values: encode.domain_texts(handler.mechanism.domain, values),
    # without unknown_as only domain values parse: no distinct memo values
    memo=MemoSupport(domain=mechanism_domain),
    explain=describe,
    canary=canary.categorical_inputs,
)


def _boolean(spec: BooleanField, share: Guarantee | None) -> BooleanHandler:
    eps, dlt = calibrated("boolean", share)
    return BooleanHandler(
        spec.name, RandomizedResponse(domain=(False, True), epsilon=eps, delta=dlt)
    )


BOOLEAN = FieldKind(
    kind="boolean",
    mechanism="randomized_response",
    model=BooleanField,
    build=_boolean,
    column=columns.boolean_column,
    texts=lambda handler, values: encode.bool_texts(values),  # a bool column's tolist()
    memo=MemoSupport(domain=mechanism_domain),
    explain=describe,
    canary=canary.boolean_inputs,
)

REGISTRATIONS = (CATEGORICAL, BOOLEAN)

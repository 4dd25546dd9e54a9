"""Registrations of the structured kinds: local hashing, sets, vectors and functions.

Vectors and functions are parsed as one float matrix per column
(``vector_column``) and written from float64 rows by orjson
(``float_rows_texts``); sets and local hashing run ``handler.parse`` value by
value (``generic_column``) and are written from per-item texts
(``string_list_texts``, ``report_texts``). Their mechanisms and handlers are
imported when a field of the kind is built: a config without one never
loads them (start-up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from privstream.config import Guarantee
from privstream.config.fields import CategoricalField, FunctionalField, SetField, VectorField
from privstream.kinds.base import (
    FieldKind,
    MemoSupport,
    calibrated,
    describe,
)
from privstream.pipeline import canary, columns, encode

if TYPE_CHECKING:
    from privstream.pipeline.structured import HashedHandler, SetHandler, VectorHandler


def _hashed(spec: CategoricalField, share: Guarantee | None) -> HashedHandler:
    from privstream.mechanisms.local_hashing import OptimalLocalHashing
    from privstream.pipeline.structured import HashedHandler

    eps, _ = calibrated("categorical (local_hashing)", share)
    # a domain only comes from ``auto`` (privstream.kinds.auto), which allows string domains only
    domain = None if spec.domain is None else tuple(str(value) for value in spec.domain)
    unknown = None if spec.unknown_as is None else str(spec.unknown_as)
    return HashedHandler(spec.name, OptimalLocalHashing(epsilon=eps), domain, unknown)


LOCAL_HASHING = FieldKind(
    kind="categorical",
    mechanism="local_hashing",
    model=CategoricalField,
    build=_hashed,
    column=columns.generic_column,
    texts=lambda handler, values: encode.report_texts(values),
    # parse gives the string itself; word 0 is the hash seed (privstream.mechanisms.local_hashing)
    memo=MemoSupport(domain=lambda handler: None, identity_words=1),
    explain=describe,
    # with a domain (``auto``), values outside it are never reported
    candidates=lambda h, values: (
        [] if h.domain is None else [v for v in values if v not in h.domain]
    ),
)


def _set(spec: SetField, share: Guarantee | None) -> SetHandler:
    from privstream.mechanisms.unary_encoding import UnaryEncoding
    from privstream.pipeline.structured import SetHandler

    eps, _ = calibrated("set", share)
    unary = UnaryEncoding(
        universe=spec.universe, max_items=spec.max_items, epsilon=eps, variant=spec.variant
    )
    return SetHandler(
        spec.name,
        unary,
        spec.universe,
        spec.max_items,
        drop_unknown=spec.on_unknown == "drop",
        truncate=spec.on_too_many == "truncate",
    )


SET = FieldKind(
    kind="set",
    mechanism="unary_encoding",
    model=SetField,
    build=_set,
    column=columns.generic_column,
    texts=lambda handler, values: encode.string_list_texts(handler.universe, values),
    explain=describe,
    candidates=lambda handler, values: [v for v in values if v not in handler.universe],
)


def _vector(spec: VectorField, share: Guarantee | None) -> VectorHandler:
    from privstream.mechanisms.vector_gaussian import VectorGaussianMechanism
    from privstream.pipeline.structured import VectorHandler

    eps, dlt = calibrated("vector", share)
    vector = VectorGaussianMechanism(
        dimension=spec.dimension,
        l2_bound=spec.l2_bound,
        epsilon=eps,
        delta=dlt,
        calibration=spec.calibration,
    )
    return VectorHandler(spec.name, vector, spec.dimension)


def _functional(spec: FunctionalField, share: Guarantee | None) -> VectorHandler:
    from privstream.mechanisms.functional import FunctionalMechanism
    from privstream.pipeline.structured import VectorHandler

    eps, dlt = calibrated("functional", share)
    functional = FunctionalMechanism(
        grid_points=spec.grid,
        bandwidth=spec.bandwidth,
        rkhs_radius=spec.rkhs_radius,
        epsilon=eps,
        delta=dlt,
        calibration=spec.calibration,
    )
    return VectorHandler(spec.name, functional, len(spec.grid))


VECTOR = FieldKind(
    kind="vector",
    mechanism="gaussian",
    model=VectorField,
    build=_vector,
    column=columns.vector_column,
    texts=lambda handler, values: encode.float_rows_texts(values),
    explain=describe,
    canary=canary.vector_inputs,
)

FUNCTIONAL = FieldKind(
    kind="functional",
    mechanism="gaussian_process",
    model=FunctionalField,
    build=_functional,
    column=columns.vector_column,
    texts=lambda handler, values: encode.float_rows_texts(values),
    explain=describe,
    # the same inputs as vectors; not measured while its error is not noise-only
    canary=canary.vector_inputs,
)

REGISTRATIONS = (LOCAL_HASHING, SET, VECTOR, FUNCTIONAL)

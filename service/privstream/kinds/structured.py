"""Registrations of the structured kinds: local hashing, sets, vectors and functions.

Vectors and functions are parsed as one float matrix per column
(``vector_column``) and written from float64 rows by orjson
(``float_rows_texts``); sets and local hashing run ``handler.parse`` value by
value (``generic_column``) and are written from per-item texts
(``string_list_texts``, ``report_texts``).
"""

from __future__ import annotations

from privstream.audit.targets import HashedTarget, SetTarget, functional_target, vector_target
from privstream.config import Guarantee
from privstream.config.fields import CategoricalField, FunctionalField, SetField, VectorField
from privstream.estimate.frequency import HashedReports, SetReports
from privstream.estimate.numeric import CurveReleases
from privstream.kinds.base import FieldKind, MemoSupport, calibrated, describe
from privstream.mechanisms.functional import FunctionalMechanism, estimate_mean_curve
from privstream.mechanisms.local_hashing import OptimalLocalHashing
from privstream.mechanisms.unary_encoding import UnaryEncoding
from privstream.mechanisms.vector_gaussian import VectorGaussianMechanism, estimate_vector_mean
from privstream.pipeline import canary, columns, encode
from privstream.pipeline.structured import HashedHandler, SetHandler, VectorHandler


def _hashed(spec: CategoricalField, share: Guarantee | None) -> HashedHandler:
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
    memo_style=lambda handler: "str",
    # parse gives the string itself; word 0 is the hash seed (privstream.mechanisms.local_hashing)
    memo=MemoSupport(domain=lambda handler: None, identity_words=1),
    estimator=lambda h, kind, options: HashedReports(h.name, kind, h.mechanism, h.domain),
    audit_target=lambda h: HashedTarget(h.name, h.mechanism, h.domain),
    explain=describe,
    # with a domain (``auto``), values outside it are never reported
    candidates=lambda h, values: (
        [] if h.domain is None else [v for v in values if v not in h.domain]
    ),
)


def _set(spec: SetField, share: Guarantee | None) -> SetHandler:
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
    memo_style=lambda handler: "str",
    estimator=lambda h, kind, options: SetReports(h.name, kind, h.mechanism),
    audit_target=lambda h: SetTarget(h.name, h.mechanism),
    audit_width=lambda h: int(h.mechanism.universe_size),
    explain=describe,
    candidates=lambda handler, values: [v for v in values if v not in handler.universe],
)


def _vector(spec: VectorField, share: Guarantee | None) -> VectorHandler:
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


def vector_releases(name: str, kind: str, mechanism: VectorGaussianMechanism) -> CurveReleases:
    """The accumulator of a vector field: per-coordinate means."""
    return CurveReleases(
        name,
        kind,
        mechanism,
        points=range(mechanism.dimension),
        mean=lambda n, m, v: estimate_vector_mean(mechanism, n, m, v),
        note=f"the mean estimates the mean of the vectors clipped to the L2 ball of radius "
        f"{mechanism.l2_bound:g}; intervals are per coordinate",
    )


def functional_releases(name: str, kind: str, mechanism: FunctionalMechanism) -> CurveReleases:
    """The accumulator of a functional field: the mean curve on the grid."""
    return CurveReleases(
        name,
        kind,
        mechanism,
        points=mechanism.grid_points.tolist(),
        mean=lambda n, m, v: estimate_mean_curve(mechanism, n, m, v),
        note=f"the mean curve estimates the mean of the curves clipped to the RKHS ball of "
        f"radius {mechanism.rkhs_radius:g}; the bands are pointwise, not simultaneous",
    )


VECTOR = FieldKind(
    kind="vector",
    mechanism="gaussian",
    model=VectorField,
    build=_vector,
    column=columns.vector_column,
    texts=lambda handler, values: encode.float_rows_texts(values),
    memo_style=lambda handler: "str",
    estimator=lambda h, kind, options: vector_releases(h.name, kind, h.mechanism),
    audit_target=lambda h: vector_target(h.name, h.mechanism),
    audit_width=lambda h: 3 * int(h.mechanism.dimension),
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
    memo_style=lambda handler: "str",
    estimator=lambda h, kind, options: functional_releases(h.name, kind, h.mechanism),
    audit_target=lambda h: functional_target(h.name, h.mechanism),
    audit_width=lambda h: 3 * int(h.mechanism.dimension),
    explain=describe,
    # the same inputs as vectors; not measured while its error is not noise-only
    canary=canary.vector_inputs,
)

REGISTRATIONS = (LOCAL_HASHING, SET, VECTOR, FUNCTIONAL)

"""Registrations of the scalar kinds: public, real (Laplace, Gaussian) and integer."""

from __future__ import annotations

from typing import Any, Literal

from privstream.config import Guarantee
from privstream.config.fields import IntegerField, PublicField, RealField
from privstream.kinds.base import (
    FieldKind,
    calibrated,
    describe,
)
from privstream.mechanisms import LaplaceMechanism
from privstream.mechanisms.gaussian import GaussianMechanism
from privstream.mechanisms.integer_laplace import IntegerLaplaceMechanism
from privstream.pipeline import canary, columns, encode
from privstream.pipeline.handlers import IntegerHandler, PublicHandler, RealHandler


def _public(spec: PublicField, share: Guarantee | None) -> PublicHandler:
    return PublicHandler(spec.name, allow_nested=spec.allow_nested)


PUBLIC = FieldKind(
    kind="public",
    mechanism=None,
    model=PublicField,
    build=_public,
    column=columns.public_column,
    texts=lambda handler, values: encode.column_texts(values),
)


def _bounds(spec: RealField) -> tuple[float, float]:
    return (float(spec.bounds[0]), float(spec.bounds[1]))


def _laplace(spec: RealField, share: Guarantee | None) -> RealHandler:
    eps, dlt = calibrated("real (laplace)", share)
    calibration: Literal["tight", "thesis"] = "thesis" if spec.calibration == "thesis" else "tight"
    mech = LaplaceMechanism(bounds=spec.bounds, epsilon=eps, delta=dlt, calibration=calibration)
    return RealHandler(spec.name, mech, _bounds(spec))


def _gaussian(spec: RealField, share: Guarantee | None) -> RealHandler:
    eps, dlt = calibrated("real (gaussian)", share)
    calibration: Literal["analytic", "classical"] = (
        "classical" if spec.calibration == "classical" else "analytic"
    )
    mech = GaussianMechanism(bounds=spec.bounds, epsilon=eps, delta=dlt, calibration=calibration)
    return RealHandler(spec.name, mech, _bounds(spec))


def _real(mechanism: str, build: Any) -> FieldKind[RealHandler]:
    return FieldKind(
        kind="real",
        mechanism=mechanism,
        model=RealField,
        build=build,
        column=columns.real_column,
        texts=lambda handler, values: encode.float_texts(values),  # a float64 column's tolist()
        explain=describe,
        canary=canary.real_inputs,
    )


REAL_LAPLACE = _real("laplace", _laplace)
REAL_GAUSSIAN = _real("gaussian", _gaussian)


def _integer(spec: IntegerField, share: Guarantee | None) -> IntegerHandler:
    eps, dlt = calibrated("integer", share)
    lo, hi = int(spec.bounds[0]), int(spec.bounds[1])
    return IntegerHandler(
        spec.name, IntegerLaplaceMechanism(bounds=(lo, hi), epsilon=eps, delta=dlt)
    )


INTEGER = FieldKind(
    kind="integer",
    mechanism="discrete_laplace",
    model=IntegerField,
    build=_integer,
    column=columns.integer_column,
    texts=lambda handler, values: encode.int_texts(values),  # an int64 column's tolist()
    explain=describe,
    canary=canary.integer_inputs,
)

REGISTRATIONS = (PUBLIC, REAL_LAPLACE, REAL_GAUSSIAN, INTEGER)

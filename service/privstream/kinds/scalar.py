"""Registrations of the scalar kinds: public, real (Laplace, Gaussian) and integer."""

from __future__ import annotations

from typing import Any, Literal

from privstream.audit.targets import IntegerTarget, RealTarget
from privstream.config import Guarantee
from privstream.config.fields import IntegerField, PublicField, RealField
from privstream.estimate.accumulators import Accumulator, Options
from privstream.estimate.numeric import NumericApi, ScalarReleases
from privstream.kinds.base import FieldKind, calibrated, describe
from privstream.mechanisms import LaplaceMechanism, gaussian, integer_laplace, laplace
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
    memo_style=lambda handler: "str",
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


def laplace_api(mechanism: LaplaceMechanism) -> NumericApi:
    return NumericApi(
        laplace.lattice_noise(mechanism),
        lambda n, m, v: laplace.estimate_mean(mechanism, n, m, v),
    )


def gaussian_api(mechanism: GaussianMechanism) -> NumericApi:
    return NumericApi(
        gaussian.lattice_noise(mechanism),
        lambda n, m, v: gaussian.estimate_mean(mechanism, n, m, v),
    )


def integer_laplace_api(mechanism: IntegerLaplaceMechanism) -> NumericApi:
    return NumericApi(
        integer_laplace.lattice_noise(mechanism),
        lambda n, m, v: integer_laplace.estimate_mean(mechanism, n, m, v),
    )


def _scalar_estimator(api: Any, integer: bool) -> Any:
    def make(handler: RealHandler | IntegerHandler, kind: str, options: Options) -> Accumulator:
        mech: Any = handler.mechanism
        numeric: NumericApi = api(mech)
        return ScalarReleases(
            handler.name, kind, mech, api=numeric, integer=integer, options=options
        )

    return make


def _real(mechanism: str, build: Any, api: Any) -> FieldKind:
    return FieldKind(
        kind="real",
        mechanism=mechanism,
        model=RealField,
        build=build,
        column=columns.real_column,
        texts=lambda handler, values: encode.float_texts(values),  # a float64 column's tolist()
        memo_style=lambda handler: "str",
        estimator=_scalar_estimator(api, integer=False),
        audit_target=lambda h: RealTarget(h.name, h.mechanism, h.bounds),
        explain=describe,
        canary=canary.real_inputs,
    )


REAL_LAPLACE = _real("laplace", _laplace, laplace_api)
REAL_GAUSSIAN = _real("gaussian", _gaussian, gaussian_api)


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
    memo_style=lambda handler: "int",
    estimator=_scalar_estimator(integer_laplace_api, integer=True),
    audit_target=lambda h: IntegerTarget(
        h.name, h.mechanism, (h.mechanism.lower, h.mechanism.upper)
    ),
    explain=describe,
    canary=canary.integer_inputs,
)

REGISTRATIONS = (PUBLIC, REAL_LAPLACE, REAL_GAUSSIAN, INTEGER)

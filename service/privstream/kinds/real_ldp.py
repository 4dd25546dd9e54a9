"""Registrations of the local mechanisms for bounded reals: PM, PM-SUB, hybrid, duchi, 3-out.

Both report an unbiased estimate of the clamped value on a fixed output
set (``privstream.mechanisms.piecewise``, ``pm_sub``, ``hybrid``, ``duchi``,
``three_outputs``); ``estimate`` gives the
mean with an interval (``privstream.estimate.unit_mean``), the audit tests
``lo`` against ``hi`` on half-lines, as for the Laplace real field. Reals are
never memoized (``memo=None``: ``RealField`` has no ``memo_identity`` or ``memoize_by``).
"""

from __future__ import annotations

from privstream.config import Guarantee
from privstream.config.fields import IntegerField, RealField
from privstream.kinds.base import (
    FieldKind,
    calibrated,
    describe,
)
from privstream.mechanisms.duchi import DuchiMechanism
from privstream.mechanisms.hybrid import HybridMechanism
from privstream.mechanisms.piecewise import PiecewiseMechanism
from privstream.mechanisms.pm_sub import PiecewiseSubMechanism
from privstream.mechanisms.three_outputs import ThreeOutputsMechanism
from privstream.mechanisms.unit_interval import UnitIntervalMechanism
from privstream.pipeline import canary, columns, encode
from privstream.pipeline.handlers import RealHandler

MECHANISMS: dict[str, type[UnitIntervalMechanism]] = {
    "piecewise": PiecewiseMechanism,
    "hybrid": HybridMechanism,
    "duchi": DuchiMechanism,
    "pm_sub": PiecewiseSubMechanism,
    "three_outputs": ThreeOutputsMechanism,
}


def _build(spec: RealField | IntegerField, share: Guarantee | None) -> RealHandler:
    eps, dlt = calibrated(f"{spec.kind} ({spec.mechanism})", share)
    bounds = (float(spec.bounds[0]), float(spec.bounds[1]))
    mech = MECHANISMS[spec.mechanism](bounds=bounds, epsilon=eps, delta=dlt)
    return RealHandler(spec.name, mech, bounds)


def _registration(mechanism: str, kind: str = "real") -> FieldKind[RealHandler]:
    return FieldKind(
        kind=kind,
        mechanism=mechanism,
        model=RealField if kind == "real" else IntegerField,
        build=_build,
        column=columns.real_column,
        texts=lambda handler, values: encode.float_texts(values),
        memo=None,  # reals and integers are not memoized
        explain=describe,
        canary=canary.real_inputs,
    )


#: an ``integer`` field on the real menu: the integer is a real in its bounds, the output a
#: real (``RealHandler`` parses any JSON number, so a fraction is used as it is, clamped)
REGISTRATIONS = tuple(
    _registration(name, kind) for kind in ("real", "integer") for name in MECHANISMS
)

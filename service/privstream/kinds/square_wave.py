"""Registration of Square Wave for a real field wanted as a distribution (``target: distribution``).

Its reports stay near the value (``privstream.mechanisms.square_wave``);
``estimate`` reconstructs the histogram from them
(``privstream.estimate.distribution``), the audit tests ``lo`` against
``hi`` on half-lines as for the other real fields. Reals are never memoized.
"""

from __future__ import annotations

from privstream.config import Guarantee
from privstream.config.fields import RealField
from privstream.kinds.base import FieldKind, calibrated, describe
from privstream.mechanisms.square_wave import SquareWaveMechanism
from privstream.pipeline import canary, columns, encode
from privstream.pipeline.handlers import RealHandler


def _build(spec: RealField, share: Guarantee | None) -> RealHandler:
    eps, dlt = calibrated("real (square_wave)", share)
    bounds = (float(spec.bounds[0]), float(spec.bounds[1]))
    return RealHandler(
        spec.name, SquareWaveMechanism(bounds=bounds, epsilon=eps, delta=dlt), bounds
    )


REGISTRATIONS = (
    FieldKind(
        kind="real",
        mechanism="square_wave",
        model=RealField,
        build=_build,
        column=columns.real_column,
        texts=lambda handler, values: encode.float_texts(values),
        memo=None,  # reals are not memoized
        explain=describe,
        canary=canary.worst_case_inputs,
    ),
)

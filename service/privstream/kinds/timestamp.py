"""The ``timestamp`` kind: a time truncated to a declared granularity, with or without noise.

``parse`` reads ISO 8601 text or an epoch number (``privstream.config.timestamps``)
and gives the *unit index* ``floor(instant / granularity)``, clamped to one
step outside the bounds (as ``IntegerHandler`` does: Python ints are
unbounded, the column is int64). ``release`` clamps the indices into the
bounds and, with ``epsilon``, adds discrete Laplace noise in whole units
(``IntegerLaplaceMechanism`` on the indices: sensitivity = the bounds'
width in units); then writes each unit's first instant in the declared
output format. The granularity, bounds and format are the config's, the
same for every record: neither whether a record is released nor the shape
of its output depends on its time. An unparseable string is dead-lettered
(``bad_timestamp``), naming the field, never the value.

Before writing, indices are clipped to the units whose start ISO text can
write (years 1 to 9999). For the noised variant that is post-processing
of the noised index, a function of the output alone, so it costs no
privacy; within any realistic bounds it never happens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from privstream.config import Guarantee
from privstream.config.fields import TimestampField
from privstream.config.timestamps import (
    EPOCH_UNIT_US,
    BadTimestamp,
    epoch_us,
    format_iso,
    iso_units,
    parse_iso,
)
from privstream.kinds.base import FieldKind, calibrated, describe
from privstream.mechanisms import NoiseSource
from privstream.mechanisms.integer_laplace import IntegerLaplaceMechanism
from privstream.pipeline import canary, columns, encode
from privstream.pipeline.encode import Numbers
from privstream.pipeline.handlers import Column, Rejected, json_type, outside

_SECOND_US = 1_000_000


@dataclass(frozen=True)
class TimestampHandler:
    """ISO text or epoch numbers -> unit indices -> (noise) -> the start of each unit."""

    name: str
    mechanism: IntegerLaplaceMechanism | None
    #: the granularity in microseconds (a whole number of seconds)
    unit_us: int
    #: (first, last) unit index released
    bounds: tuple[int, int]
    epoch_unit: str = "s"
    assume_utc: bool = False
    output: str = "iso"
    granularity: str = ""

    def parse(self, value: object) -> int:
        if isinstance(value, str):
            try:
                instant = parse_iso(value, assume_utc=self.assume_utc)
            except BadTimestamp as exc:
                raise Rejected("bad_timestamp", f"field {self.name!r}: {exc}") from None
        elif isinstance(value, int | float) and not isinstance(value, bool):
            instant = epoch_us(value, self.epoch_unit)
        else:
            raise Rejected(
                "wrong_type",
                f"field {self.name!r}: expected ISO 8601 text or an epoch number, "
                f"got {json_type(value)}",
            )
        lower, upper = self.bounds
        return min(max(instant // self.unit_us, lower - 1), upper + 1)

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        column = np.asarray(values, dtype=np.int64)
        lower, upper = self.bounds
        mech = self.mechanism
        released = np.clip(column, lower, upper) if mech is None else mech.release(column, source)
        shown = np.clip(released, *iso_units(self.unit_us))
        error = None if mech is None else (lambda: mech.noise_error(column, released))
        count = outside(column, lower, upper)
        if self.output == "iso":
            seconds = shown * (self.unit_us // _SECOND_US)
            return Column(lambda: format_iso(seconds), error, count)
        scale = self.unit_us // EPOCH_UNIT_US[self.output.removeprefix("epoch_")]
        numbers: NDArray[np.int64] = shown * scale
        return Column(numbers.tolist, error, count, Numbers(numbers))

    def starts_ms(self, released: Sequence[object]) -> NDArray[np.int64]:
        """Released values back to their units' first instants, in epoch milliseconds: the
        ledger's windows under ``privacy.ledger.time``. ValueError where one is no unit
        start in this field's output format (never guessed: the ledger charges by it)."""
        unit_s = self.unit_us // _SECOND_US
        if self.output == "iso":
            texts = [v[:-1] for v in released if type(v) is str and v.endswith("Z")]
            if len(texts) != len(released):
                raise ValueError(f"field {self.name!r}: a released value is no ISO text")
            try:
                seconds = np.array(texts, dtype="datetime64[s]").astype(np.int64)
            except ValueError:  # numpy's message quotes the text
                raise ValueError(f"field {self.name!r}: a released value is no ISO text") from None
        else:
            if not all(type(v) is int for v in released):
                raise ValueError(f"field {self.name!r}: a released value is no epoch integer")
            numbers = np.array(released, dtype=np.int64)
            seconds = numbers if self.output == "epoch_s" else numbers // 1000
            if self.output == "epoch_ms" and (numbers % 1000).any():
                raise ValueError(f"field {self.name!r}: a released value is no unit start")
        if (seconds % unit_s).any():
            raise ValueError(f"field {self.name!r}: a released value is no unit start")
        return seconds * 1000

    def index_of(self, released: object) -> int | None:
        """A released value back to its unit index (estimate, audit); None if it is none."""
        try:
            if self.output == "iso":
                instant = parse_iso(str(released), assume_utc=False)
            elif type(released) is int:
                instant = epoch_us(released, self.output.removeprefix("epoch_"))
            else:
                return None
        except BadTimestamp:
            return None
        return instant // self.unit_us if instant % self.unit_us == 0 else None


def _build(spec: TimestampField, share: Guarantee | None) -> TimestampHandler:
    bounds = spec.unit_bounds
    mech = None
    if spec.epsilon is not None:
        eps, dlt = calibrated("timestamp (discrete_laplace)", share)
        mech = IntegerLaplaceMechanism(bounds=bounds, epsilon=eps, delta=dlt)
    return TimestampHandler(
        spec.name,
        mech,
        spec.unit_us,
        bounds,
        epoch_unit=spec.epoch_unit,
        assume_utc=spec.assume_utc,
        output=spec.output,
        granularity=spec.granularity,
    )


def _released_range(handler: TimestampHandler) -> list[str]:
    """The first and the last unit released without noise, as ISO text."""
    seconds = np.asarray(handler.bounds, dtype=np.int64) * (handler.unit_us // _SECOND_US)
    return format_iso(seconds)


def _explain_public(handler: TimestampHandler) -> dict[str, Any]:
    return {
        "granularity": handler.granularity,
        "units": _released_range(handler),
        "public_transform": (
            f"truncated to {handler.granularity} and released as is, without noise: "
            "not private (the truncated time is a quasi-identifier)"
        ),
    }


def _explain_noised(handler: TimestampHandler) -> dict[str, Any]:
    entry = describe(handler)
    entry["granularity"] = handler.granularity
    entry["units"] = _released_range(handler)  # params lower/upper as times
    entry["metric"] = f"{entry['metric']}, in units of {handler.granularity}"
    return entry


def _registration(mechanism: str | None) -> FieldKind[TimestampHandler]:
    return FieldKind(
        kind="timestamp",
        mechanism=mechanism,
        model=TimestampField,
        build=_build,
        column=columns.generic_column,
        texts=lambda handler, values: encode.column_texts(values),
        explain=_explain_public if mechanism is None else _explain_noised,
        canary=None if mechanism is None else canary.integer_inputs,
    )


TIMESTAMP = _registration(None)
TIMESTAMP_NOISED = _registration("discrete_laplace")

REGISTRATIONS = (TIMESTAMP, TIMESTAMP_NOISED)

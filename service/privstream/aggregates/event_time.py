"""``window.time``: a record's event time from one of its own fields, in epoch milliseconds.

The field is a ``kind: timestamp`` field (config load checks it) and its raw
value is parsed as that kind parses it (``privstream.config.timestamps``:
ISO 8601 text, or an epoch number in the field's ``epoch_unit``, with its
``assume_utc``), neither truncated to its granularity nor clamped into its
bounds: the window holds the instant itself. A value that is missing, null,
of another type or unparseable gives None, and the record is left out of
the aggregate. The time is read from the raw record, as every aggregate
reads its values (the central model): which window a record enters is a
function of that record alone, like its cell (docs/proofs/aggregates.md,
step 22).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from privstream.aggregates.read import read
from privstream.config.fields import FieldConfig
from privstream.config.timestamps import BadTimestamp, epoch_us, parse_iso

_MS_US = 1000
#: the time source of an aggregate without ``window.time`` (``AggregatePlan.time_source``)
KAFKA_TIME = "kafka"


@dataclass(frozen=True)
class FieldTime:
    """Reads one timestamp field's raw time from a record (None: no readable time)."""

    field: str
    epoch_unit: str = "s"
    assume_utc: bool = False

    def __call__(self, record: Mapping[str, Any]) -> int | None:
        value = read(record, self.field)
        try:
            if isinstance(value, str):
                instant = parse_iso(value, assume_utc=self.assume_utc)
            elif isinstance(value, int | float) and not isinstance(value, bool):
                instant = epoch_us(value, self.epoch_unit)
            else:
                return None
        except BadTimestamp:
            return None
        # +-inf and NaN parse to +-2^80 us: past the future limit, or before the first window
        return instant // _MS_US

    @property
    def source(self) -> str:
        """The time source as the internal topic records it (``time_record``): the field
        and how its value is parsed, since each of them moves a record's instant."""
        return f"field:{self.field}:{self.epoch_unit}:{str(self.assume_utc).lower()}"

    @classmethod
    def of(cls, name: str | None, fields: Mapping[str, FieldConfig]) -> FieldTime | None:
        """The reader of ``window.time`` (None: windows follow the Kafka timestamp)."""
        if name is None:
            return None
        spec = fields[name]  # config load checked it is a timestamp field
        unit = getattr(spec, "epoch_unit", "s")
        return cls(name, unit, bool(getattr(spec, "assume_utc", False)))


def describe(source: str) -> str:
    """A time source (``FieldTime.source`` or ``KAFKA_TIME``) in words, for messages."""
    if source == KAFKA_TIME:
        return "the Kafka timestamp"
    name, unit, utc = source.removeprefix("field:").rsplit(":", 2)
    return f"window.time {name!r} (epoch_unit {unit}, assume_utc {utc})"

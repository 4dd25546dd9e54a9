"""The ``estimate`` accumulator of a noised ``timestamp`` field: the integer one, on unit indices.

A released time is read back to its unit index (``TimestampHandler.index_of``:
``floor(instant / granularity)``, units counted from 1970-01-01T00:00:00Z),
and the indices are estimated exactly as an ``integer`` field's releases
(``ScalarReleases``: the mean and the deconvolved histogram of the clamped
indices). A value that is no unit start of the field's format is skipped as
invalid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from privstream.estimate.accumulators import MISSING, Options, Truth
from privstream.estimate.numeric import NumericApi, ScalarReleases, ScalarTruth
from privstream.kinds.timestamp import TimestampHandler


class TimestampTruth(ScalarTruth):
    """The true indices are the parsed ones (the raw values are text or epoch numbers)."""

    def add(self, parsed: Sequence[Any], raw: Sequence[Any]) -> None:
        super().add(parsed, parsed)


class TimestampReleases(ScalarReleases):
    """Released times as unit indices, estimated like integer releases."""

    def __init__(
        self, handler: TimestampHandler, kind: str, options: Options, api: NumericApi
    ) -> None:
        if handler.mechanism is None:  # only noised registrations have an estimator
            raise TypeError(f"{handler.name}: a timestamp without epsilon has no estimate")
        super().__init__(
            handler.name, kind, handler.mechanism, api=api, integer=True, options=options
        )
        self.handler = handler
        self.notes.append(
            f"values are unit indices: unit i is the {handler.granularity} starting "
            f"i x {handler.granularity} after 1970-01-01T00:00:00Z"
        )

    def add(self, values: Sequence[Any]) -> None:
        index_of = self.handler.index_of
        super().add([value if value is MISSING else index_of(value) for value in values])

    def new_truth(self) -> TimestampTruth:
        return TimestampTruth(float(self.numeric.lower), float(self.numeric.upper), self.histogram)

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]:
        entry = super().report(options, truth)
        entry["unit"] = self.handler.granularity
        return entry

"""The audit target of a noised ``timestamp`` field: the integer one, on unit indices.

Inputs are the starts of the first and the last unit of the bounds, written
as the field reads them (ISO text), so the whole path is audited: parsing,
truncation, clamping, noise and formatting; outputs are read back to unit
indices (``TimestampHandler.index_of``) and tested on half-lines like an
``integer`` field's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from privstream.audit.targets import IntegerTarget
from privstream.config.timestamps import format_iso
from privstream.errors import AuditError
from privstream.kinds.timestamp import TimestampHandler


class TimestampTarget(IntegerTarget):
    """``timestamp`` with epsilon: the bounds' first and last unit, half-lines at indices."""

    def __init__(self, handler: TimestampHandler) -> None:
        if handler.mechanism is None:  # only noised registrations have a target
            raise AuditError(f"field {handler.name!r}: released as is, nothing to audit")
        super().__init__(handler.name, handler.mechanism, handler.bounds)
        self.handler = handler

    @property
    def inputs(self) -> tuple[Any, ...]:
        seconds = np.asarray(self.handler.bounds, dtype=np.int64) * (
            self.handler.unit_us // 1_000_000
        )
        return tuple(format_iso(seconds))

    def convert(self, values: list[Any]) -> NDArray[Any]:
        indices = [self.handler.index_of(value) for value in values]
        if None in indices:
            raise AuditError(f"field {self.name!r}: a release is no unit start of the field")
        return np.asarray(indices, dtype=np.float64)

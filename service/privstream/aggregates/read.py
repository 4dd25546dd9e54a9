"""What an aggregate reads from one raw record: its cell, its value, its unit's identity.

A record the aggregate cannot read is left out of it (and of its bounds):
a group value that is not a declared key (or a boolean: ``True == 1`` in
Python), a histogram value outside the domain, a sum or mean value that is
not a number (a boolean, NaN; an infinity or an integer beyond the doubles
is clamped like any value past a bound), a ``select_groups`` key longer than
``MAX_KEY_CHARS``, or a missing subject or correlation value. Fields are
read by their paths (``device.os``, as the record path reads them:
``read``). Which records are left out is a function of each record alone,
so it is part of the query, covered by its sensitivity.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from numpy.typing import NDArray

from privstream.config.fields import DomainValue
from privstream.config.paths import split_path

#: one cell: its group keys in group-by order, then the histogram bin
Cell = tuple[DomainValue, ...]
#: ``select_groups``: a string group key longer than this is no key (each cell of a
#: window's partial stays a few kilobytes at most: ``windows.encode_partial``)
MAX_KEY_CHARS = 256


@dataclass(frozen=True)
class RecordReader:
    """Reads the cell, the grid value and the unit identities of raw JSON records."""

    #: the fields naming the cell, in cell order, and each one's declared keys
    cell_fields: tuple[str, ...]
    #: None: any string or integer key (``select_groups``)
    cell_keys: tuple[frozenset[DomainValue] | None, ...]
    #: sum and mean: the field, bounds, centre and grid step; None for counts
    value_field: str | None = None
    bounds: tuple[float, float] = (0.0, 0.0)
    center: float = 0.0
    step: float = 1.0
    subject: str | None = None
    correlated_by: str | None = None
    #: density: values' whitened kernel vectors on the grid (``DensityPart.whitened``)
    vector: Callable[[Sequence[float]], NDArray[np.int64]] | None = None

    def cell(self, record: Mapping[str, Any]) -> Cell | None:
        keys: list[DomainValue] = []
        for name, allowed in zip(self.cell_fields, self.cell_keys, strict=True):
            key: Any = read(record, name)
            if not _keyable(key) or (
                key not in allowed if allowed is not None else len(str(key)) > MAX_KEY_CHARS
            ):
                return None
            keys.append(key)
        return tuple(keys)

    def number(self, record: Mapping[str, Any]) -> float | None:
        """The value field as a float (an infinity past a bound), or None if it is none."""
        return number_of(read(record, self.value_field) if self.value_field is not None else None)

    def value(self, record: Mapping[str, Any]) -> int | None:
        """The clamped, centred value on the grid (``round`` ties to even: monotone)."""
        value = self.number(record)
        if value is None:
            return None
        lo, hi = self.bounds
        return round((min(max(value, lo), hi) - self.center) / self.step)

    @staticmethod
    def identity(record: Mapping[str, Any], name: str | None) -> bytes | None:
        """The canonical JSON of a field's raw value (``identity_of``); b"" without a field."""
        return b"" if name is None else identity_of(read(record, name))


def identity_of(raw: Any) -> bytes | None:
    """The canonical JSON of a raw value (``"1"`` and ``1`` differ), or None: absent, null,
    or not writable as JSON (a lone surrogate, an integer past 64 bits: a line read through
    ``json``), so the record is left out of the bounded aggregates."""
    if raw is None:
        return None
    try:
        canonical = orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError
        return None
    # a copy: orjson's bytes keep a 4 KiB block however short, and the accumulator holds
    # one identity per subject (100,000 subjects x 3 aggregates: 1.2 GB instead of 15 MB)
    return bytes(memoryview(canonical))


def _keyable(key: object) -> bool:
    """Whether ``key`` can be a group key: exact types (a JSON boolean is no key, ``True ==
    1``, nor a float), and one the release can write as JSON: an integer orjson holds (64
    bits; a line read through ``json`` may carry more) and a string without lone surrogates
    (``"\\ud800"``, which ``json`` reads and UTF-8 cannot hold). Decided by the key alone."""
    if type(key) is int:
        return -(2**63) <= key < 2**64
    if type(key) is not str:
        return False
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def number_of(raw: Any) -> float | None:
    """A raw value as a number: a float (an infinity past a bound), or None if it is none."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    try:
        value = float(raw)
    except OverflowError:  # an int beyond the doubles: past a bound, clamped to it
        value = math.inf if raw > 0 else -math.inf
    return None if math.isnan(value) else value


def read(record: Mapping[str, Any], name: str) -> Any:
    """The value a field name's path leads to (``device.os``: the key ``os`` of the object
    under ``device``), None where an object on the way is absent or not an object."""
    value: Any = record
    for key in split_path(name):
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def cell_labels(fields: Sequence[str], cell: Cell) -> dict[str, DomainValue]:
    """The released ``group`` of a cell: field name to key."""
    return dict(zip(fields, cell, strict=True))

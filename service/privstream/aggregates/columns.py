"""What an aggregate reads from a batch of records, as arrays: ``RecordReader``'s verdicts.

Each record's cell is an index into the batch's cells (-1: the reader's
``cell`` is None), its number a float64 (the reader's ``number``; NaN and a
False flag where that is None). The common batch (top-level fields of
dicts, declared string keys, numbers of every record) is read by one C loop
a column (``_columns.fill``); any other batch value by value, by the same
rules as ``RecordReader``. A batch may also be of the field decoder's
structs (``privstream.pipeline.decode``: file mode decodes only the fields
the aggregates read), read through their members, an absent field as None.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from privstream.aggregates.read import (
    MAX_KEY_CHARS,
    Cell,
    RecordReader,
    _keyable,
    number_of,
    read,
)
from privstream.config.fields import DomainValue
from privstream.config.paths import split_path
from privstream.pipeline import _columns
from privstream.pipeline.columns import MISSING
from privstream.pipeline.decode import decoded_struct, reader

Ints = NDArray[np.int64]
Floats = NDArray[np.float64]
Mask = NDArray[np.bool_]
Records = list[Any]
#: a group field's declared keys (None: any, ``select_groups``)
Keys = frozenset[DomainValue] | None
#: codes up to this many are renumbered by a table, not by sorting
_TABLE = 1 << 16


class Batch:
    """A batch of records and the columns read from it so far: the aggregates of a window
    read each field once (the arrays are shared: never written to)."""

    def __init__(self, records: Iterable[Mapping[str, Any]]) -> None:
        self.records = list(records)
        self._keys: dict[tuple[str, Keys], tuple[Ints, list[DomainValue]]] = {}
        self._numbers: dict[str, tuple[Floats, Mask]] = {}
        self._columns: dict[str, list[Any]] = {}

    def __len__(self) -> int:
        return len(self.records)

    def key_codes(self, name: str, allowed: Keys) -> tuple[Ints, list[DomainValue]]:
        found = self._keys.get((name, allowed))
        if found is None:
            found = self._keys[name, allowed] = key_codes(self.records, name, allowed)
        return found

    def column(self, name: str) -> list[Any]:
        found = self._columns.get(name)
        if found is None:
            found = self._columns[name] = column(self.records, name)
        return found

    def numbers(self, name: str) -> tuple[Floats, Mask]:
        found = self._numbers.get(name)
        if found is None:
            found = self._numbers[name] = numbers(self.records, name)
        return found


def cell_codes(reader: RecordReader, batch: Batch) -> tuple[Ints, list[Cell]]:
    """Each record's cell as an index into the cells returned, -1 where it has none."""
    codes = np.zeros(len(batch), np.int64)
    cells: list[Cell] = [()]
    for name, allowed in zip(reader.cell_fields, reader.cell_keys, strict=True):
        field, keys = batch.key_codes(name, allowed)
        width = max(len(keys), 1)
        joint = np.where((codes < 0) | (field < 0), -1, codes * width + field)
        # renumbered after each field: codes stay below the batch's size
        distinct, codes = renumbered(joint, len(cells) * width)
        cells = [(*cells[u // width], keys[u % width]) for u in distinct.tolist()]
    return codes, cells


def renumbered(codes: Ints, size: int) -> tuple[Ints, Ints]:
    """The distinct codes (ascending, -1 left out) and each one's index among them (-1
    for -1): by a table of ``size`` entries when that is no larger than the batch, else by
    sorting."""
    valid = codes >= 0
    if size > max(len(codes), _TABLE):
        distinct, inverse = np.unique(codes[valid], return_inverse=True)
    else:
        distinct = np.flatnonzero(np.bincount(codes[valid], minlength=size))
        table = np.zeros(size, np.int64)
        table[distinct] = np.arange(len(distinct))
        inverse = table[codes[valid]]
    out = np.full(len(codes), -1, np.int64)
    out[valid] = inverse
    return distinct, out


def key_codes(records: Records, name: str, allowed: Keys) -> tuple[Ints, list[DomainValue]]:
    """Each record's key of one group field as an index into the keys returned (-1: none):
    exactly a string or an integer (a boolean is none) JSON can write (``_keyable``: no lone
    surrogate, at most 64 bits), declared, or any not too long."""
    if allowed is not None:
        keys = list(allowed)
        # an unwritable declared key matches nothing, in C as in ``RecordReader.cell``
        table = {key: index for index, key in enumerate(keys) if _keyable(key)}
        key = _top_level(records, name)
        if key is not None and _columns.only(keys, (str,)):
            # a declared string equals no value of another type: the C lookup is exact
            out = np.empty(len(records), np.int64)
            if _columns.fill(records, key, _columns.POSITION, out, table):
                return out, keys
        values = column(records, name)
        codes = [table.get(v, -1) if _keyable(v) else -1 for v in values]
        return np.array(codes, np.int64).reshape(-1), keys
    found: dict[DomainValue, int] = {}
    codes = [
        found.setdefault(v, len(found)) if _keyable(v) and len(str(v)) <= MAX_KEY_CHARS else -1
        for v in column(records, name)
    ]
    return np.array(codes, np.int64).reshape(-1), list(found)


def numbers(records: Records, name: str) -> tuple[Floats, Mask]:
    """Each record's value field as a float (``number_of``) and whether it has one."""
    out = np.empty(len(records), np.float64)
    key = _top_level(records, name)
    if key is None or not _columns.fill(records, key, _columns.FLOAT, out, None):
        read_ = [number_of(v) for v in column(records, name)]
        out = np.array([np.nan if v is None else v for v in read_], np.float64).reshape(-1)
    return out, ~np.isnan(out)


def grid_values(reader: RecordReader, values: Floats) -> Ints:
    """``RecordReader.value`` of each number: clamped, centred, rounded to the grid (ties
    to even, as ``round``)."""
    lo, hi = reader.bounds
    clamped = np.minimum(np.maximum(values, float(lo)), float(hi))
    return np.rint((clamped - reader.center) / reader.step).astype(np.int64)


def column(records: Records, name: str) -> list[Any]:
    """The field's value in each record (``read``: None where absent)."""
    key = _top_level(records, name)
    if key is None:
        return [read(record, name) for record in records]
    values = _columns.column(records, key, None)
    if records and type(records[0]) is not dict:  # a struct's absent field is MISSING
        values, _ = _columns.replace_absent(values, MISSING, None)
    return values


def _top_level(records: Records, name: str) -> Any:
    """What to read the field with in C, None if it is not read so: a top-level name of a
    batch of dicts, or its member in a batch of the field decoder's structs."""
    keys = split_path(name)
    if len(keys) != 1:
        return None
    if _columns.only(records, (dict,)):
        return keys[0]
    structs = _columns.only(records, (type(records[0]),)) and decoded_struct(records[0])
    return reader(records, keys[0]) if structs else None

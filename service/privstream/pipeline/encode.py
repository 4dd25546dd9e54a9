"""Output encoding: the JSON text ``json.dumps`` would write, built a column at a time.

Every function here gives exactly the bytes of
``json.dumps(value, separators=(",", ":")).encode()`` (ASCII, compact), only
faster: orjson writes whole numeric columns where its notation and digits
agree with ``repr``, and records are assembled from per-column texts.

Per-record cost
---------------
A record is put together (``privstream.pipeline.assemble``) by one C loop
(``_columns.assemble``) from its columns' pieces: a text every record
shares (a key), a text per record, or orjson's text of a whole numeric
column, which the loop cuts at its commas, so a number costs no Python
object. A released column may come in an
encoded form (``Column.encoded``, set by its handler): ``Numbers`` are
written by one ``orjson.dumps``; consecutive ``Choices`` (finite domains:
categorical, boolean) become one piece through a table of every combination
of their texts with the keys between them, indexed by one numpy expression
over their positions. Any other column is its kind's ``texts``, and so is a
``Numbers`` column orjson would not write as ``json.dumps`` does (a float
below ``1e-4``, inf, nan): the kind's ``texts`` stay the specification and
the fallback.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii  # what json.dumps uses (ensure_ascii)
from typing import Any

import numpy as np
import orjson
from numpy.typing import NDArray

#: from here on up, orjson writes a finite float exactly as ``float.__repr__`` does
_ORJSON_FLOAT_MIN = 1e-4
_LITERALS = {True: b"true", False: b"false"}


@dataclass(frozen=True)
class Numbers:
    """A released column of JSON numbers: a float64 or int64 array."""

    values: NDArray[np.float64] | NDArray[np.int64]
    #: the rows written as ``null`` instead (``on_missing: null``), if any
    nulls: NDArray[np.bool_] | None = None


@dataclass(frozen=True)
class Choices:
    """Released positions into a finite domain, with the JSON text of each domain value."""

    positions: NDArray[np.int64]
    texts: tuple[bytes, ...]


Encoded = Numbers | Choices
#: a record piece (``_columns.assemble``): one text for every record, a text per record,
#: or one text of every record's number separated by commas
Piece = bytes | list[bytes] | tuple[bytes]


def _orjson_texts(values: list[Any]) -> list[bytes]:
    """The JSON text of each number of a non-empty list, from one ``orjson.dumps``."""
    return orjson.dumps(values)[1:-1].split(b",")


def _value_text(value: Any) -> bytes:
    """``json.dumps(value, separators=(",", ":")).encode()`` with fast exits for scalars."""
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value).encode()
    if kind is int:
        return int.__repr__(value).encode()
    if kind is float and math.isfinite(value):
        return float.__repr__(value).encode()
    if kind is bool:
        return _LITERALS[value]
    if value is None:
        return b"null"
    return json.dumps(value, separators=(",", ":")).encode()


def orjson_exact(array: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Where orjson writes a float as ``float.__repr__`` does.

    Finite and (0 or >= 1e-4): repr's digits and notation (below 1e-4 orjson
    writes 0.0000999 and 1.5e-7 where repr writes 9.99e-05 and 1.5e-07; inf
    and nan become null).
    """
    magnitude = np.abs(array)
    large_or_zero = (magnitude >= _ORJSON_FLOAT_MIN) | (array == 0)
    exact: NDArray[np.bool_] = large_or_zero & (magnitude < np.inf)
    return exact


def float_texts(values: list[float]) -> list[bytes]:
    if np.all(orjson_exact(np.asarray(values, dtype=np.float64))):
        return _orjson_texts(values)
    return list(map(_value_text, values))


def int_texts(values: list[int]) -> list[bytes]:
    try:  # orjson writes 64-bit integers as repr does
        return _orjson_texts(values)
    except TypeError:  # beyond 64 bits
        return list(map(_value_text, values))


def column_texts(values: list[Any]) -> list[bytes]:
    """Each value as ``json.dumps`` writes it (ASCII, compact), a whole column at a time."""
    if not values:
        return []
    kinds = set(map(type, values))
    if len(kinds) == 1:
        (kind,) = kinds
        if kind is float:
            return float_texts(values)
        if kind is int:
            return int_texts(values)
        if kind is bool:
            return bool_texts(values)
        if kind is str:
            distinct = set(values)
            if len(distinct) * 4 <= len(values):  # few distinct: encode each once
                table = {value: _value_text(value) for value in distinct}
                return list(map(table.__getitem__, values))
    return list(map(_value_text, values))


def bool_texts(values: list[bool]) -> list[bytes]:
    """A bool column's ``tolist()``."""
    return list(map(_LITERALS.__getitem__, values))


def float_rows_texts(rows: Sequence[NDArray[np.float64]]) -> list[bytes]:
    """Each row of floats as ``json.dumps(row.tolist())`` writes it, without Python floats.

    orjson writes a numpy row with the digits and notation of ``float.__repr__``
    wherever ``orjson_exact`` holds (``tests/unit/pipeline/test_fast_path.py``); a row
    holding a value below ``1e-4`` (or a non-finite one) is written by ``json.dumps``.
    """
    if not rows:
        return []
    matrix = np.asarray(rows, dtype=np.float64)
    texts = list(map(_numpy_dumps, matrix))
    for p in np.flatnonzero(~np.all(orjson_exact(matrix), axis=1)).tolist():
        texts[p] = json.dumps(matrix[p].tolist(), separators=(",", ":")).encode()
    return texts


def _numpy_dumps(row: NDArray[np.float64]) -> bytes:
    return orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY)


def string_list_texts(items: Sequence[str], values: list[list[str]]) -> list[bytes]:
    """Lists of the strings ``items`` (a set's universe): each item encoded once."""
    table = {item: _value_text(item) for item in items}
    item_text = table.__getitem__
    return [b"[" + b",".join(map(item_text, row)) + b"]" for row in values]


def report_texts(values: list[dict[str, int]]) -> list[bytes]:
    """Local hashing reports ``{"seed": s, "bucket": y}`` (integers) as json.dumps writes them."""
    seeds = [report["seed"] for report in values]
    buckets = [report["bucket"] for report in values]
    if not values or set(map(type, seeds)) | set(map(type, buckets)) != {int}:
        return list(map(_value_text, values))
    return [
        b'{"seed":' + seed + b',"bucket":' + bucket + b"}"
        for seed, bucket in zip(int_texts(seeds), int_texts(buckets), strict=True)
    ]


def domain_texts(domain: Sequence[Any], values: list[Any]) -> list[bytes]:
    """Values of a finite domain (strings and integers, no bools): each encoded once."""
    table = {value: _value_text(value) for value in domain}
    return list(map(table.__getitem__, values))


def value_texts(values: Iterable[Any]) -> tuple[bytes, ...]:
    """The JSON text of each value (a domain's, for ``Choices``)."""
    return tuple(map(_value_text, values))

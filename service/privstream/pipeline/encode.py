"""Output encoding: the JSON text ``json.dumps`` would write, built a column at a time.

Every function here gives exactly the bytes of
``json.dumps(value, separators=(",", ":")).encode()`` (ASCII, compact), only
faster: orjson writes whole numeric columns where its notation and digits
agree with ``repr``, and records are assembled from per-column texts.

Per-record cost
---------------
A record is put together by one C loop (``_columns.assemble``) from its
columns' pieces: a text every record shares (a key), a text per record, or
orjson's text of a whole numeric column, which the loop cuts at its commas,
so a number costs no Python object. A released column may come in an
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

import functools
import itertools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii  # what json.dumps uses (ensure_ascii)
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import orjson
from numpy.typing import NDArray

from privstream.pipeline import _columns

if TYPE_CHECKING:
    from privstream.pipeline.handlers import Column
    from privstream.pipeline.plan import PlannedField

#: from here on up, orjson writes a finite float exactly as ``float.__repr__`` does
_ORJSON_FLOAT_MIN = 1e-4
_LITERALS = {True: b"true", False: b"false"}
#: combined tables of consecutive finite columns hold at most this many entries
COMBINED_TEXTS_MAX = 1024


@dataclass(frozen=True)
class Numbers:
    """A released column of JSON numbers: a float64 or int64 array."""

    values: NDArray[np.float64] | NDArray[np.int64]


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


def _orjson_exact(array: NDArray[np.float64]) -> NDArray[np.bool_]:
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
    if np.all(_orjson_exact(np.asarray(values, dtype=np.float64))):
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
    wherever ``_orjson_exact`` holds (``tests/unit/pipeline/test_fast_path.py``); a row
    holding a value below ``1e-4`` (or a non-finite one) is written by ``json.dumps``.
    """
    if not rows:
        return []
    matrix = np.asarray(rows, dtype=np.float64)
    texts = list(map(_numpy_dumps, matrix))
    for p in np.flatnonzero(~np.all(_orjson_exact(matrix), axis=1)).tolist():
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


def encode_records(
    fields: Sequence[PlannedField], columns: Sequence[Column], count: int
) -> list[bytes]:
    """``json.dumps({name: column.values[i] ...}, separators=(",", ":")).encode()`` for every row.

    Each column is written from its encoded form, or else by its kind's ``texts``
    (``privstream.kinds``), which knows the types its release gives. The records are
    put together by one C loop (``_columns.assemble``) from the columns' pieces.
    """
    if not fields:
        return [b"{}"] * count
    if not count:
        return []
    return _columns.assemble(_pieces(fields, columns), count)


def encode_block(fields: Sequence[PlannedField], columns: Sequence[Column], count: int) -> bytes:
    """``encode_records``' texts, each followed by a newline, as one text (file mode: no
    object per record)."""
    if not fields:
        return b"{}\n" * count
    if not count:
        return b""
    return _columns.assemble(_pieces(fields, columns), count, True)


def _pieces(fields: Sequence[PlannedField], columns: Sequence[Column]) -> list[Piece]:
    segments = _segments(fields, columns)
    pieces: list[Piece] = []
    for at, (prefix, part) in enumerate(segments):
        suffix = b"}" if at == len(segments) - 1 else b""
        pieces += _render(prefix, part, suffix)
    return pieces


@dataclass
class _Group:
    """Consecutive finite columns written as one piece (``_choices_texts``)."""

    #: each column with the key text before it (the first's is the segment's prefix: empty)
    columns: list[tuple[bytes, Choices]]
    #: entries of their combined table
    size: int


#: a segment's content: finite columns, a column of numbers (with what its kind's
#: ``texts`` need, should orjson's text differ), or a column's texts
_Part = _Group | tuple[Numbers, "PlannedField", "Column"] | list[bytes]


def _segments(
    fields: Sequence[PlannedField], columns: Sequence[Column]
) -> list[tuple[bytes, _Part]]:
    """(text before the segment's first value, its content), consecutive finite columns merged."""
    segments: list[tuple[bytes, _Part]] = []
    for j, (planned, column) in enumerate(zip(fields, columns, strict=True)):
        key = (("{" if j == 0 else ",") + encode_basestring_ascii(planned.name) + ":").encode()
        form = column.encoded
        if isinstance(form, Choices) and _in_domain(form):
            last = segments[-1][1] if segments else None
            size = len(form.texts)
            if isinstance(last, _Group) and last.size * size <= COMBINED_TEXTS_MAX:
                last.columns.append((key, form))
                last.size *= size
            else:
                segments.append((key, _Group([(b"", form)], size)))
        elif isinstance(form, Numbers):
            segments.append((key, (form, planned, column)))
        else:
            segments.append((key, planned.entry.texts(planned.handler, column.values)))
    return segments


def _in_domain(choices: Choices) -> bool:
    """Every position indexes a text (else the kind's ``texts`` fail as they always did)."""
    positions, size = choices.positions, len(choices.texts)
    return bool(size and (not len(positions) or (positions.min() >= 0 and positions.max() < size)))


def _render(prefix: bytes, part: _Part, suffix: bytes) -> list[Piece]:
    """The record pieces of one segment."""
    if isinstance(part, _Group):
        return [_choices_texts(prefix, part.columns, suffix)]
    if isinstance(part, tuple):
        numbers, planned, column = part
        pieces = number_pieces(numbers.values, prefix, suffix)
        if pieces is not None:
            return pieces
        part = planned.entry.texts(planned.handler, column.values)
    return _framed(prefix, part, suffix)


def _framed(prefix: bytes, texts: Piece, suffix: bytes) -> list[Piece]:
    """``prefix``, the texts and ``suffix``, leaving out what is empty."""
    return [piece for piece in (prefix, texts, suffix) if piece != b""]


def number_pieces(
    values: NDArray[np.float64] | NDArray[np.int64], prefix: bytes, suffix: bytes
) -> list[Piece] | None:
    """The pieces of ``prefix + text + suffix`` for each number, from one ``orjson.dumps``;
    None where orjson would not write what ``json.dumps`` does (a float below 1e-4, inf, nan).

    orjson writes int64 as ``repr`` does; any other dtype (a float32's shortest digits are
    not its float64 value's) is left to the kind's texts too. Its text of the array, less
    the brackets, holds every number separated by commas (a number holds none): one
    piece that ``_columns.assemble`` cuts, with no Python object per number.
    """
    if not _as_repr(values):
        return None
    body = orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]
    return _framed(prefix, (body,), suffix)


def _as_repr(values: NDArray[np.float64] | NDArray[np.int64]) -> bool:
    """Whether orjson writes every value of the array as ``repr`` (and json.dumps) does."""
    if values.dtype == np.int64:
        return True
    floats = cast(NDArray[np.float64], values)
    return values.dtype == np.float64 and bool(np.all(_orjson_exact(floats)))


def _choices_texts(
    prefix: bytes, group: Sequence[tuple[bytes, Choices]], suffix: bytes
) -> list[bytes]:
    """Each row's text of a group of finite columns: one lookup in their combined table."""
    table = _combined_table(prefix, tuple((key, c.texts) for key, c in group), suffix)
    index = np.zeros(len(group[0][1].positions), dtype=np.int64)
    for _, choices in group:
        index = index * len(choices.texts) + choices.positions.astype(np.int64, copy=False)
    texts: list[bytes] = table[index].tolist()
    return texts


@functools.lru_cache(maxsize=64)
def _combined_table(
    prefix: bytes, group: tuple[tuple[bytes, tuple[bytes, ...]], ...], suffix: bytes
) -> NDArray[np.object_]:
    """``prefix + t0 + key1 + t1 + ... + suffix`` for every combination, first column slowest."""
    texts = [[key + text for text in texts] for key, texts in group]
    table = [prefix + b"".join(combination) + suffix for combination in itertools.product(*texts)]
    array = np.empty(len(table), dtype=object)
    array[:] = table
    array.flags.writeable = False  # shared by every batch (the cache)
    return array

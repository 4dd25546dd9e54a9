"""Records put together from their columns' texts (``privstream.pipeline.encode``).

``encode_records`` gives, for each row, exactly the bytes of
``json.dumps(nest(paths, values), separators=(",", ":")).encode()``
(``privstream.pipeline.nesting``: a nested field's value under its object); the
per-record cost and the fallbacks are described in ``encode``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import orjson
from numpy.typing import NDArray

from privstream.pipeline import _columns
from privstream.pipeline.encode import Choices, Numbers, Piece, orjson_exact
from privstream.pipeline.handlers import Column
from privstream.pipeline.nesting import key_texts, layout, output_path
from privstream.pipeline.plan import PlannedField

#: combined tables of consecutive finite columns hold at most this many entries
COMBINED_TEXTS_MAX = 1024


def encode_records(
    fields: Sequence[PlannedField], columns: Sequence[Column], count: int
) -> list[bytes]:
    """``json.dumps(nest(paths, values), separators=(",", ":")).encode()`` for every row.

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
    paths = [output_path(planned.handler) for planned in fields]
    order = layout(paths)
    texts = key_texts(paths, order)
    segments = _segments([fields[p] for p in order], [columns[p] for p in order], texts)
    pieces: list[Piece] = []
    for at, (prefix, part) in enumerate(segments):
        suffix = texts[-1] if at == len(segments) - 1 else b""
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
    fields: Sequence[PlannedField], columns: Sequence[Column], texts: Sequence[bytes]
) -> list[tuple[bytes, _Part]]:
    """(text before the segment's first value, its content), consecutive finite columns merged.

    ``texts``: the keys' text before each value, in the order written (``nesting.key_texts``).
    """
    segments: list[tuple[bytes, _Part]] = []
    for planned, column, key in zip(fields, columns, texts[: len(fields)], strict=True):
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
            segments.append((key, planned.codec.texts(planned.handler, column.values)))
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
        pieces = number_pieces(numbers.values, prefix, suffix, numbers.nulls)
        if pieces is not None:
            return pieces
        part = planned.codec.texts(planned.handler, column.values)
    return _framed(prefix, part, suffix)


def _framed(prefix: bytes, texts: Piece, suffix: bytes) -> list[Piece]:
    """``prefix``, the texts and ``suffix``, leaving out what is empty."""
    return [piece for piece in (prefix, texts, suffix) if piece != b""]


def number_pieces(
    values: NDArray[np.float64] | NDArray[np.int64],
    prefix: bytes,
    suffix: bytes,
    nulls: NDArray[np.bool_] | None = None,
) -> list[Piece] | None:
    """The pieces of ``prefix + text + suffix`` for each number (``null`` where ``nulls``
    holds), from one ``orjson.dumps``; None where orjson would not write what
    ``json.dumps`` does (a float below 1e-4, inf, nan).

    orjson writes int64 as ``repr`` does; any other dtype (a float32's shortest digits are
    not its float64 value's) is left to the kind's texts too. Its text of the array, less
    the brackets, holds every number separated by commas (a number holds none): one
    piece that ``_columns.assemble`` cuts, with no Python object per number. With null
    rows, orjson writes the column's list (numpy's ``tolist`` of the masked array: None
    in those rows) in the same notation.
    """
    if not _as_repr(values):
        return None
    if nulls is not None and nulls.any():
        listed = np.ma.masked_array(values, nulls).tolist()
        return _framed(prefix, (orjson.dumps(listed)[1:-1],), suffix)
    body = orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]
    return _framed(prefix, (body,), suffix)


def _as_repr(values: NDArray[np.float64] | NDArray[np.int64]) -> bool:
    """Whether orjson writes every value of the array as ``repr`` (and json.dumps) does."""
    if values.dtype == np.int64:
        return True
    floats = cast(NDArray[np.float64], values)
    return values.dtype == np.float64 and bool(np.all(orjson_exact(floats)))


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

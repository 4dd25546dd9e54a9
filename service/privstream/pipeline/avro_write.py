"""Avro's binary encoding of a record, by writers compiled once from a derived schema.

fastavro's schemaless writer walks the schema for every record, about 9 µs
for the reference record, more than the sanitization itself
(docs/benchmarks.md); the schemas privstream writes use few types
(``privstream.pipeline.avro_schema``), so each field gets a small function
for its type instead, built once per schema. The encoding is Avro 1.11's:
longs as zigzag varints, doubles as 8 little-endian bytes, strings and
arrays length-prefixed (an array as one block and a 0), an enum its symbol's
index, a union its branch's index and the value (lengths, counts and indexes are
longs too: zigzag). The unit tests read every
kind back with fastavro's reader.

A value of the wrong type raises ``TypeError``, a long out of range
``OverflowError``, a string that is no UTF-8 or an unknown enum symbol
``ValueError``: the encoder dead-letters that record (``avro_encode``).
A union takes the first branch the value fits, so an integer beyond 64 bits
in a public field's union is written as a double.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Writer = Callable[[Any], bytes]
_DOUBLE = struct.Struct("<d").pack
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_TRUE, _FALSE = b"\x01", b"\x00"
#: the varint of a small unsigned number, by number
_SMALL = [bytes([n]) for n in range(128)]


def record_writer(schema: dict[str, Any], prefix: bytes = b"") -> Writer:
    """The writer of a record schema: record (a dict) -> ``prefix`` and its Avro binary
    encoding."""
    fields = [(f["name"], writer(f["type"])) for f in schema["fields"]]

    def write(record: Any) -> bytes:
        if type(record) is not dict:
            raise TypeError("a record must be an object")
        return prefix + b"".join([write_field(record.get(name)) for name, write_field in fields])

    return write


def writer(avro: Any) -> Writer:
    """The writer of one Avro type (as the derived schemas spell them)."""
    if isinstance(avro, list):
        return _union(avro)
    if isinstance(avro, str):
        return _PRIMITIVES[avro]
    kind = avro["type"]
    if kind == "enum":
        return _enum(avro["symbols"])
    if kind == "array":
        return _array(writer(avro["items"]))
    if kind == "record":
        return record_writer(avro)
    return writer(kind)  # {"type": "long"}


def varint(n: int) -> bytes:
    """The varint of an unsigned number (a long's zigzag form, or a count doubled)."""
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _long(value: Any) -> bytes:
    if type(value) is not int:
        raise TypeError("a long must be an integer")
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise OverflowError("a long has 64 bits")
    return varint((value << 1) ^ (value >> 63))


def _double(value: Any) -> bytes:
    if type(value) is not float and type(value) is not int:
        raise TypeError("a double must be a number")
    return _DOUBLE(value)


def _boolean(value: Any) -> bytes:
    if type(value) is not bool:
        raise TypeError("a boolean must be true or false")
    return _TRUE if value else _FALSE


def _string(value: Any) -> bytes:
    if type(value) is not str:
        raise TypeError("a string must be text")
    data = value.encode()  # UnicodeEncodeError (a ValueError) for a lone surrogate
    return varint(len(data) << 1) + data


def _null(value: Any) -> bytes:
    if value is not None:
        raise TypeError("null must be null")
    return b""


_PRIMITIVES: dict[str, Writer] = {
    "null": _null,
    "boolean": _boolean,
    "long": _long,
    "double": _double,
    "string": _string,
}


def _enum(symbols: Sequence[str]) -> Writer:
    indexes = {symbol: varint(i << 1) for i, symbol in enumerate(symbols)}

    def write(value: Any) -> bytes:
        found = indexes.get(value) if type(value) is str else None
        if found is None:
            raise ValueError("not a symbol of the enum")
        return found

    return write


def _array(item: Writer) -> Writer:
    def write(values: Any) -> bytes:
        if type(values) is not list:
            raise TypeError("an array must be a list")
        if not values:
            return b"\x00"
        return varint(len(values) << 1) + b"".join([item(v) for v in values]) + b"\x00"

    return write


#: the Python types (as JSON decodes them) each Avro type takes
_TAKES: dict[str, tuple[type, ...]] = {
    "null": (type(None),),
    "boolean": (bool,),
    "long": (int,),
    "double": (float, int),
    "string": (str,),
    "enum": (str,),
    "array": (list,),
    "record": (dict,),
}


def _union(branches: Sequence[Any]) -> Writer:
    if len(branches) == 2 and branches[0] == "null":  # a nullable field: the common case
        value_writer = writer(branches[1])
        return lambda value: b"\x00" if value is None else b"\x02" + value_writer(value)
    # by the value's type, the branches that take it, in order: no exception on the way
    # to the branch but for an integer beyond 64 bits or a string that is no symbol
    by_type: dict[type, list[tuple[bytes, Writer]]] = {}
    for i, branch in enumerate(branches):
        for taken in _TAKES[branch if isinstance(branch, str) else branch["type"]]:
            by_type.setdefault(taken, []).append((varint(i << 1), writer(branch)))

    def write(value: Any) -> bytes:
        for index, branch_writer in by_type.get(type(value), ()):
            try:
                return index + branch_writer(value)
            except (TypeError, OverflowError, ValueError):
                continue
        raise TypeError("the value fits no branch of the union")

    return write


BatchWriter = Callable[[Sequence[Any]], list[bytes]]


def batch_writer(schema: dict[str, Any], prefix: bytes = b"") -> BatchWriter:
    """The writer of a batch of records, a column at a time; raises as ``record_writer``
    would for some record of the batch, without saying which (``record_writer`` finds it)."""
    columns = [(f["name"], _column(f["type"])) for f in schema["fields"]]

    def write(records: Sequence[Any]) -> list[bytes]:
        if any(type(record) is not dict for record in records):
            raise TypeError("a record must be an object")
        pieces = [[prefix] * len(records)]
        pieces.extend(column([r.get(name) for r in records]) for name, column in columns)
        return list(map(b"".join, zip(*pieces, strict=True)))

    return write


def _column(avro: Any) -> BatchWriter:
    """Write a column of one type; the common scalar types in bulk, others value by value."""
    if avro == "double":
        return _doubles
    if avro == "long":
        return _longs
    if avro == "boolean":
        return _booleans
    if isinstance(avro, dict) and avro.get("type") == "enum":
        return _enum_column(avro["symbols"])
    if isinstance(avro, list):
        return _union_column(avro)
    one = writer(avro)
    return lambda values: list(map(one, values))


def _union_column(branches: Sequence[Any]) -> BatchWriter:
    """A union column whose values all have one type (none null, for a nullable field) is
    written in bulk by the first branch that takes that type; any other value by value."""
    one = _union(branches)
    first: dict[type, tuple[bytes, BatchWriter]] = {}
    for i, branch in enumerate(branches):
        for taken in _TAKES[branch if isinstance(branch, str) else branch["type"]]:
            first.setdefault(taken, (varint(i << 1), _column(branch)))

    def write(values: Sequence[Any]) -> list[bytes]:
        kinds = set(map(type, values))
        bulk = first.get(kinds.pop()) if len(kinds) == 1 else None
        if bulk is not None:
            index, column = bulk
            try:
                return [index + piece for piece in column(values)]
            except (TypeError, OverflowError, ValueError):
                pass  # e.g. an integer beyond 64 bits: the next branch that takes it
        return list(map(one, values))

    return write


#: by identity: ``1 == True``, and a 1 is no boolean
_BOOLEANS = {id(True): _TRUE, id(False): _FALSE}


def _booleans(values: Sequence[Any]) -> list[bytes]:
    try:
        return [_BOOLEANS[id(v)] for v in values]
    except KeyError:
        return list(map(_boolean, values))  # raises for the first value that is no boolean


def _enum_column(symbols: Sequence[str]) -> BatchWriter:
    indexes = {symbol: varint(i << 1) for i, symbol in enumerate(symbols)}
    one = _enum(symbols)

    def write(values: Sequence[Any]) -> list[bytes]:
        try:  # only a str equals a symbol
            return [indexes[v] for v in values]
        except (KeyError, TypeError):  # TypeError: an unhashable value
            return list(map(one, values))  # raises for the first value that is no symbol

    return write


def _doubles(values: Sequence[Any]) -> list[bytes]:
    if not all(type(v) is float for v in values):
        return list(map(_double, values))
    data = np.asarray(values, dtype="<f8").tobytes()
    return [data[i : i + 8] for i in range(0, len(data), 8)]


#: a long's zigzag form in 7-bit groups, least significant first: at most 10
_GROUP_SHIFTS = np.arange(0, 70, 7, dtype=np.uint64)


def _longs(values: Sequence[Any]) -> list[bytes]:
    """Zigzag varints of a column of integers, computed in numpy."""
    if not all(type(v) is int for v in values):
        return list(map(_long, values))  # raises for the first value that is no integer
    try:
        signed = np.asarray(values, dtype=np.int64)
    except OverflowError:
        return list(map(_long, values))  # raises for the first value beyond 64 bits
    zigzag = ((signed << 1) ^ (signed >> 63)).view(np.uint64)  # wraps as two's complement
    groups = (zigzag[:, None] >> _GROUP_SHIFTS) & np.uint64(0x7F)
    lengths = 1 + np.count_nonzero(zigzag[:, None] >> _GROUP_SHIFTS[1:], axis=1)
    more = np.arange(10) < (lengths - 1)[:, None]  # every group but the last has bit 7 set
    data = (groups | (more.astype(np.uint64) << np.uint64(7))).astype(np.uint8).tobytes()
    return [data[i : i + n] for i, n in zip(range(0, len(data), 10), lengths.tolist(), strict=True)]

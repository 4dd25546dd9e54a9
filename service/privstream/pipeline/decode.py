"""The fast path's JSON decoding: a batch of messages to dicts, and what is left to the reference.

The reference (``privstream.pipeline.parse.decode_record``) decodes each
message with the stdlib; the fast path must give the same value for every
field it reads, and must never accept a message the reference refuses. Two
decoders serve it:

* **msgspec, the plan's fields only** (``_field_decoder``): each JSON object
  becomes a struct of the fields the plan reads (``MISSING`` where it lacks
  one), every other member checked for syntax and skipped without building
  it. An object on a nested field's path (``device`` of ``device.os``) is
  read the same way, into a struct of its named keys only, or is null; any
  other value there refuses the batch, which the second decoder then reads
  (the reference dead-letters that record). Structs rather than dicts:
  msgspec matches a struct's keys without hashing them, builds no hash
  table per record, and the collector never tracks them (0.25 against 0.39
  µs a reference record, 0.40 against 0.66 with issue 32's nested and
  optional fields; orjson's dicts 0.45 and 0.73). ``_columns`` reads a
  struct's fields through their member descriptors (``reader``). Used for a
  whole batch at once, and only where it is exact:

  - msgspec checks UTF-8 only in the strings it builds; every message is
    checked first (``_columns.utf8``, ``bytes.decode``'s own verdict);
  - msgspec reads an integer of any length exactly, and the reference
    never converts one of more than ``long_integers.digit_bound()`` digits
    (the process's ``int`` limit, at most 4,300; its sign decides): only
    batches whose longest message is shorter than that bound are decoded
    here, whatever limit the process set (with none, ``int(str)``'s
    quadratic time would be open to a 10 MB digit string);
  - nesting deeper than the stdlib follows: ``deep``, as for orjson below;
  - msgspec (0.22) compares keys with each name's *cached* UTF-8 form and
    never computes it: a non-ASCII name without one matched only the key
    ``""``. Only plans whose names are all ASCII are decoded here (an ASCII
    str's UTF-8 form is its own data).

  Past that, what msgspec accepts the stdlib accepts with the same values:
  numbers correctly rounded (``float(token)``; integers exact, of any
  length), strings exactly (escapes, surrogate pairs; a lone surrogate is
  refused), the last of duplicate keys, escaped keys unescaped. Anything
  it refuses (NaN, ``1e999``, a lone surrogate, a non-object, bad syntax)
  sends the batch to the second decoder.
  ``tests/unit/pipeline/test_decode.py`` checks these claims one by one.
* **orjson**: the whole batch in one loop where msgspec may not read it (a
  long message, a message not UTF-8, a non-ASCII name), else message by
  message; every message it decodes to a dict is taken (integers beyond 64
  bits are read as floats; ``columns`` keeps them off the fast path; one
  beyond the double range, a long one among them, is refused), the others
  go to the reference.

The rest of the fast path reads the plan's fields from the structs or dicts
(``reader``, ``empty_below``) and never looks at another key.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import operator
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import msgspec
import orjson

from privstream.pipeline import _columns
from privstream.pipeline.columns import MISSING, only
from privstream.pipeline.long_integers import digit_bound

#: a record this short cannot nest deeper than half its length
_SHALLOW_BYTES = 400
#: nesting bound below which the stdlib decoder never reaches the recursion limit
_MAX_FAST_BRACKETS = 200
#: what msgspec raises for a message it refuses (a string's bad UTF-8 is a ValueError)
_REFUSED = (msgspec.DecodeError, ValueError, RecursionError)

#: the decoded records (structs of the field decoder, or dicts), their input indices, and
#: the indices left to the reference
Decoded = tuple[list[Any], list[int], list[int]]


#: what the decoder reads: top-level names, or paths into nested objects
Names = Sequence[str | tuple[str, ...]]
#: a decoder's members: key -> None (the whole value) or the members of the object under it
Tree = dict[str, "Tree | None"]


#: a struct type's fields: JSON key -> (its member descriptor, the struct type of the object
#: under it, or None for a value read whole)
Members = dict[str, tuple[Any, "type[msgspec.Struct] | None"]]
#: the members of each struct type ``_struct`` made (weak: the decoder cache drops types)
_MEMBERS: weakref.WeakKeyDictionary[type, Members] = weakref.WeakKeyDictionary()


@functools.lru_cache(maxsize=64)
def _field_decoder(names: tuple[str | tuple[str, ...], ...]) -> msgspec.json.Decoder[Any]:
    """A decoder of JSON objects into structs of ``names`` only (``_struct``)."""
    return msgspec.json.Decoder(_struct(read_tree(names)))


def read_tree(names: Names) -> Tree:
    """The keys read at each level; a value read whole (None) covers any path under it."""
    tree: Tree = {}
    for name in names:
        keys = (name,) if isinstance(name, str) else name
        node: Tree | None = tree
        for depth, key in enumerate(keys):
            if node is None:
                break
            if depth == len(keys) - 1:
                node[key] = None
            else:
                node = node.setdefault(key, {})
    return tree


def _struct(tree: Tree) -> type[msgspec.Struct]:
    """A struct type of the tree's keys: each field named by its position and renamed to its
    JSON key (any string, whatever Python allows as a name), ``MISSING`` where the object
    lacks it; the object under a key with keys below it is such a struct too, or null.
    ``gc=False``: decoded JSON makes no cycles, so the collector need never track them."""
    fields: list[tuple[str, Any, Any]] = []
    rename: dict[str, str] = {}
    children: dict[str, type[msgspec.Struct] | None] = {}
    for position, (key, sub) in enumerate(tree.items()):
        attribute = f"f{position}"
        rename[attribute] = key
        child = children[key] = None if sub is None else _struct(sub)
        fields.append((attribute, Any if child is None else Optional[child], MISSING))  # noqa: UP045
    made = msgspec.defstruct("Fields", fields, rename=rename, gc=False)
    _MEMBERS[made] = {key: (vars(made)[f"f{p}"], children[key]) for p, key in enumerate(tree)}
    return made


def _members(holders: Sequence[Any]) -> Members | None:
    """The members of the holders' struct type (one type for a whole list), None for dicts."""
    return _MEMBERS.get(type(holders[0])) if holders else None


def decoded_struct(obj: object) -> bool:
    """Whether ``obj`` is a struct the field decoder made (``_struct``)."""
    return type(obj) in _MEMBERS


def holds(struct: object, keys: Sequence[str]) -> bool:
    """Whether a struct the field decoder made reads each key (top-level) whole: its
    value as decoded, not a struct of some of its keys."""
    members = _MEMBERS.get(type(struct))
    return members is not None and all(members.get(key, (None, True))[1] is None for key in keys)


def field_structs(messages: Sequence[bytes], names: Names) -> list[Any] | None:
    """Every message decoded by msgspec into a struct of ``names`` (``_field_decoder``), or
    None if it refuses one. No check of this module's docstring is made here: the caller
    decides where msgspec's values are the ones it needs."""
    try:
        return list(map(_field_decoder(tuple(names)).decode, messages))
    except _REFUSED:
        return None


def as_structs(objects: Sequence[dict[str, Any]], names: Sequence[str]) -> list[Any]:
    """Decoded dicts as the structs ``field_structs`` makes of top-level ``names`` (the
    values themselves, not copies; an absent name ``MISSING``): a batch may mix lines
    each decoder read."""
    kind = _field_decoder(tuple(names)).type
    return [msgspec.convert(obj, kind) for obj in objects]


def reader(holders: Sequence[Any], key: str) -> Any:
    """What ``_columns`` reads ``key`` of each holder with: the member descriptor of a
    decoded struct's field, or ``key`` itself for dicts."""
    members = _members(holders)
    return key if members is None else members[key][0]


def empty_below(holders: Sequence[Any], key: str) -> Any:
    """The holder standing for an absent or null object under ``key`` (``_columns.descend``):
    a struct of the object's type with every field absent, or an empty dict."""
    members = _members(holders)
    child = None if members is None else members[key][1]
    return {} if child is None else child()


def decode_batch(messages: Sequence[bytes], longest: int | None, names: Names) -> Decoded:
    """Decoded objects with their input indices, and the indices left to the reference.

    ``names``: the fields the caller reads (a path: a nested field). ``longest``: the
    longest message's length when the caller knows it.
    """
    size = _columns.longest(messages)  # -1 unless every message is bytes
    if not messages or size < 0:
        return _one_by_one(messages)
    objs = _whole_batch(messages, names, size)
    if objs is None or deep(messages, size if longest is None else longest):
        return _one_by_one(messages)
    return objs, list(range(len(objs))), []


def _whole_batch(messages: Sequence[bytes], names: Names, size: int) -> list[Any] | None:
    """Every message decoded in one C loop (to a struct, or a dict), or None if one is
    refused: by msgspec where it reads as the stdlib does (module docstring), else by
    orjson."""
    fields = tuple(dict.fromkeys(names))
    keys = [key for name in fields for key in ((name,) if isinstance(name, str) else name)]
    if size < digit_bound() and all(map(str.isascii, keys)) and _columns.utf8(messages):
        try:
            return list(map(_field_decoder(fields).decode, messages))
        except _REFUSED:
            return None
    try:
        objs = list(map(orjson.loads, messages))
    except orjson.JSONDecodeError:
        return None
    return objs if only(objs, dict) else None


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a batch's records are decoded and read.

    A record holding an object is a container the collector tracks (one of
    scalars only is not): every 700 of them it would scan the young ones,
    and scan them again later while they live, about a third of what reading
    a nested record costs. Decoded JSON makes no cycles, and the records are
    freed before the collector runs again (if it was off, it stays off).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _one_by_one(messages: Sequence[bytes]) -> Decoded:
    """orjson per message: its dicts taken, every other message left to the reference."""
    loads, error = orjson.loads, orjson.JSONDecodeError
    records: list[dict[str, Any]] = []
    where: list[int] = []
    slow: list[int] = []
    for index, raw in enumerate(messages):
        if type(raw) is not bytes:
            slow.append(index)
            continue
        try:
            obj = loads(raw)
        except error:  # invalid JSON or UTF-8, NaN, 1e999, a lone surrogate, a BOM, ...
            slow.append(index)
            continue
        if type(obj) is not dict or deep([raw], len(raw)):
            slow.append(index)
            continue
        records.append(obj)
        where.append(index)
    return records, where, slow


def deep(messages: Sequence[bytes], longest: int) -> bool:
    """Whether a message may nest deeper than the stdlib decoder can follow (C loops only).

    ``longest``: the length of the longest message.
    """
    if longest <= _SHALLOW_BYTES:
        return False
    count = bytes.count
    brackets = map(count, messages, itertools.repeat(b"["))
    braces = map(count, messages, itertools.repeat(b"{"))
    deepest: int = max(map(operator.add, brackets, braces))
    return deepest > _MAX_FAST_BRACKETS

"""Fields at paths into nested objects (``device.os``, ``privstream.config.paths``).

Reading: the value at a field's path is ``MISSING`` where a key on the way
is absent or an object on the way is null (the field's ``on_missing`` then
decides, as for an absent top-level field), and the record is rejected
(``wrong_type``, naming the field and where the path broke) where a value on
the way is neither an object nor null. Which of the three happens depends on
the shape of the record only, never on a value of the field.

Writing: the output nests the fields' values as their paths say, each object
holding the named keys only (the allow-list: a sibling no field names is
never copied), in the order of their first field in the plan (``nest`` for
the reference, ``layout`` for the fast encoder: the same bytes).

The fast path reads a batch's column one level at a time (``holders``): one C
loop per level (``_columns.descend``), no Python call per record, over the
decoder's structs or dicts (``privstream.pipeline.decode.reader``).
"""

from __future__ import annotations

from collections.abc import Sequence
from json.encoder import encode_basestring_ascii
from typing import Any

from privstream.config.paths import join_path, split_path
from privstream.pipeline import _columns
from privstream.pipeline.columns import MISSING
from privstream.pipeline.decode import empty_below, reader
from privstream.pipeline.handlers import FieldHandler, Rejected, json_type


def source_path(handler: FieldHandler) -> tuple[str, ...]:
    """The keys of the record value a handler reads: its name's, or for a presence bit
    (``privstream.pipeline.missing``) its field's."""
    source: str = getattr(handler, "source", handler.name)
    return split_path(source)


def output_path(handler: FieldHandler) -> tuple[str, ...]:
    """The keys its released value is written under."""
    return split_path(handler.name)


def lookup(record: dict[str, Any], keys: tuple[str, ...], name: str) -> Any:
    """The value at ``keys`` in a decoded record, ``MISSING`` if a key on the way is absent
    or an object on the way null; Rejected if one is neither (``name``: the field's)."""
    value: Any = record
    for depth, key in enumerate(keys):
        if depth and value is None:
            return MISSING
        if not isinstance(value, dict):
            raise Rejected(
                "wrong_type",
                f"field {name!r}: expected an object at {join_path(keys[:depth])!r}, "
                f"got {json_type(value)}",
            )
        value = value.get(key, MISSING)
        if value is MISSING:
            return MISSING
    return value


def released(record: dict[str, Any], keys: tuple[str, ...], missing: object) -> Any:
    """The value at ``keys`` in a sanitized record, ``missing`` wherever the path breaks
    (what ``privstream estimate`` reads: it skips such a record, never fails on it)."""
    value: Any = record
    for key in keys:
        if not isinstance(value, dict):
            return missing
        value = value.get(key, missing)
    return value


def holders(
    records: list[Any], keys: tuple[str, ...], cache: dict[tuple[str, ...], Any]
) -> tuple[list[Any], set[int]]:
    """The object holding the path's last key, for every record (an empty one where the path
    breaks), and the rows where a value on the way is neither an object nor null.

    ``cache``: one batch's holders by path prefix, shared by the fields under one object.
    """
    parents = keys[:-1]
    if not parents:
        return records, set()
    if parents not in cache:
        above, wrong = holders(records, keys[:-1], cache)
        key = parents[-1]
        children, more = _columns.descend(
            above, reader(above, key), empty_below(above, key), MISSING
        )
        cache[parents] = (children, wrong | set(more))
    found: tuple[list[Any], set[int]] = cache[parents]
    return found


def nest(paths: Sequence[tuple[str, ...]], values: Sequence[Any]) -> dict[str, Any]:
    """One output record: each value under its path, objects in first-use order."""
    record: dict[str, Any] = {}
    for keys, value in zip(paths, values, strict=True):
        target = record
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value
    return record


def layout(paths: Sequence[tuple[str, ...]]) -> list[int]:
    """The plan's field positions in the order ``nest`` writes them (fields under one object
    together, at their first field's place)."""
    first: dict[tuple[str, ...], int] = {}
    for position, keys in enumerate(paths):
        for depth in range(1, len(keys) + 1):
            first.setdefault(keys[:depth], position)
    return sorted(
        range(len(paths)),
        key=lambda p: [first[paths[p][:depth]] for depth in range(1, len(paths[p]) + 1)],
    )


def key_texts(paths: Sequence[tuple[str, ...]], order: Sequence[int]) -> list[bytes]:
    """The text before each value written in ``order`` (``{"device":{"os":``), then the
    closing text after the last: what joins the values into ``json.dumps(nest(...))``."""
    texts: list[bytes] = []
    previous: tuple[str, ...] = ()
    for position in order:
        keys = paths[position]
        shared = _common(previous[:-1], keys[:-1])
        text = "}" * (len(previous) - 1 - shared) if previous else ""
        opening = "{" if not previous else ","
        for depth in range(shared, len(keys)):
            text += opening + _key_text(keys[depth]) + ":"
            opening = "{"
        texts.append(text.encode())
        previous = keys
    texts.append(("}" * len(previous)).encode())
    return texts


def _common(left: tuple[str, ...], right: tuple[str, ...]) -> int:
    """How many leading keys two paths share."""
    count = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        count += 1
    return count


def _key_text(key: str) -> str:
    return str(encode_basestring_ascii(key))

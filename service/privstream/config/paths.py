"""Field names as paths into nested objects: ``device.os``, ``path: [device, os]``.

A field's ``name`` is a path: keys joined by dots, read from the top-level
object down (``device.os`` is the key ``os`` of the object under ``device``).
A key holding a dot or a backslash is written with a backslash before it:
``app\\.version`` is the top-level key ``app.version``, ``a\\\\b`` the key ``a\\b``;
a backslash before any other character is an error. ``path: [device, os]``
spells the same path as a list of keys, and is stored as the ``name`` it
spells (``join_path``), so the two spellings are one field with one release id.

Two fields whose paths are equal, or one of which lies under the other
(``device`` public and ``device.os`` noised), are a config error
(``path_problems``): the allow-list names each released value once.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from privstream.config.missing import presence_name

#: what a key's dot, backslash and opening bracket are written as in a name
_ESCAPES = {".": "\\.", "\\": "\\\\", "[": "\\["}
#: what ends a key that would step into every element of an array (not supported)
_ARRAY = "[]"


def escape_key(key: str) -> str:
    """One key as a name writes it: dots, backslashes and brackets escaped."""
    return "".join(_ESCAPES.get(char, char) for char in key)


def join_path(keys: Sequence[str]) -> str:
    """The name that spells ``keys``."""
    return ".".join(map(escape_key, keys))


@functools.lru_cache(maxsize=1024)
def split_path(name: str) -> tuple[str, ...]:
    """The keys a name spells; ValueError naming the name and the fix if it spells none."""
    keys: list[str] = []
    key: list[str] = []  # its characters, an escaped one as its escape (``\\[``)
    chars = iter(name)
    for char in chars:
        if char == "\\":
            escaped = next(chars, "")
            if escaped not in _ESCAPES:
                raise ValueError(
                    f"name {name!r}: a backslash escapes a dot, a backslash or a bracket "
                    "only; write \\. for a dot inside a key, \\\\ for a backslash"
                )
            key.append(_ESCAPES[escaped])
        elif char == ".":
            keys.append(_key(name, key))
            key = []
        else:
            key.append(char)
    keys.append(_key(name, key))
    return tuple(keys)


def _key(name: str, chars: list[str]) -> str:
    """One key of ``name`` from its characters (escapes as written)."""
    if not chars:
        raise ValueError(
            f"name {name!r}: a path has an empty key (a leading, trailing or double dot); "
            "write keys joined by single dots, and \\. for a dot inside a key"
        )
    if chars[-2:] == list(_ARRAY):
        raise ValueError(
            f"name {name!r}: paths into arrays are not supported (a value under an array is "
            "one release per element, as many as each record holds); name the array itself "
            "with kind public and allow_nested: true, or kind drop (write \\[ for a bracket "
            "inside a key)"
        )
    return "".join(char[-1] for char in chars)


def name_from_path(data: Any) -> Any:
    """A field entry with ``path: [keys]`` as the equivalent ``name`` (before validation)."""
    if not isinstance(data, dict) or "path" not in data:
        return data
    keys = data["path"]
    if "name" in data:
        raise ValueError("give name or path, not both (path: [device, os] is name: device.os)")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
        raise ValueError("path must be a list of non-empty strings (the keys, outermost first)")
    rest = {option: value for option, value in data.items() if option != "path"}
    return {"name": join_path(keys), **rest}


def path_problems(fields: Sequence[Any]) -> list[tuple[int, str]]:
    """(position, message) of each field whose path equals another field's (however
    spelled) or lies under another field's path (or under a presence bit's,
    ``<name>_present``: a released value too)."""
    kinds = {split_path(spec.name): spec.kind for spec in fields}
    for spec in fields:
        if getattr(spec, "presence_epsilon", None) is not None:
            kinds[split_path(presence_name(spec.name))] = "presence bit"
    problems: list[tuple[int, str]] = []
    first: dict[tuple[str, ...], tuple[int, str]] = {}
    for position, spec in enumerate(fields):
        keys = split_path(spec.name)
        at, earlier = first.setdefault(keys, (position, spec.name))
        # two spellings of one path (``tag[`` and ``tag\\[``); equal names are refused elsewhere
        if at != position and earlier != spec.name:
            problems.append(
                (
                    position,
                    f"field {spec.name!r} names the same value as field {earlier!r} (both "
                    f"spell the path {list(keys)}); keep one of them",
                )
            )
            continue
        for depth in range(1, len(keys)):
            above = kinds.get(keys[:depth])
            if above is not None:
                problems.append(
                    (
                        position,
                        f"field {spec.name!r} lies under field {join_path(keys[:depth])!r} "
                        f"(kind {above}), which already covers that whole object; remove "
                        "one of them, or name the other keys of the object one by one",
                    )
                )
                break
    return problems

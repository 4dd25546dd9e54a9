"""Why a new record schema cannot read what an old one wrote, field by field (BACKWARD).

The registry decides; this names the fields for the error that stops the
worker (``privstream.worker.output_schema``), in terms of the config: a new
field without a default, a type that changed, domain values that are gone.
Avro's resolution rules, as far as derived schemas use them: promotions
(int to long, float or double; long to float or double; float to double;
string and bytes), enums by symbol, arrays by item, unions by branch, records
by field name.
"""

from __future__ import annotations

from typing import Any

_PROMOTIONS = {
    "int": ("long", "float", "double"),
    "long": ("float", "double"),
    "float": ("double",),
    "string": ("bytes",),
    "bytes": ("string",),
}


def backward_problems(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Why records written with ``old`` cannot be read with ``new``: one line per field."""
    written = {f["name"]: f for f in old.get("fields", ())}
    problems: list[str] = []
    for entry in new.get("fields", ()):
        name = entry["name"]
        before = written.get(name)
        if before is None:
            if "default" not in entry:
                problems.append(
                    f"field {name!r} is new and has no default, and the records already "
                    "in the topic lack it"
                )
            continue
        why = _unreadable(before["type"], entry["type"])
        if why is not None:
            problems.append(f"field {name!r} {why}")
    return problems


def _unreadable(writer: Any, reader: Any) -> str | None:
    if isinstance(writer, list):  # every branch written must be readable
        whys = (_unreadable(branch, reader) for branch in writer)
        return next((why for why in whys if why is not None), None)
    if isinstance(reader, list):  # some branch must read it
        if all(_unreadable(writer, branch) is not None for branch in reader):
            return f"was {_show(writer)} and is now {_show(reader)}"
        return None
    was, now = _kind(writer), _kind(reader)
    if was != now and now not in _PROMOTIONS.get(was, ()):
        return f"was {_show(writer)} and is now {_show(reader)}"
    if was == "enum":
        gone = [s for s in writer["symbols"] if s not in reader["symbols"]]
        if gone and "default" not in reader:
            return f"no longer has the domain values {gone}, which records already hold"
    if was == "array":
        why = _unreadable(writer["items"], reader["items"])
        return None if why is None else f"(its items) {why}"
    if was == "record":
        problems = backward_problems(writer, reader)
        return f"({'; '.join(problems)})" if problems else None
    return None


def _kind(avro: Any) -> str:
    return avro if isinstance(avro, str) else str(avro.get("type"))


def _show(avro: Any) -> str:
    if isinstance(avro, list):
        return " or ".join(map(_show, avro))
    kind = _kind(avro)
    if kind == "enum":
        return f"an enum of {list(avro['symbols'])}"
    if kind == "array":
        return f"an array of {_show(avro['items'])}"
    if kind == "record":
        return f"a record {avro.get('name')}"
    return kind if isinstance(avro, str) else _show(kind)

"""Missing and null values of a noised field: ``on_missing``, ``impute``, ``presence_public``.

* ``dead_letter`` (the default): a record whose field is absent or null is
  dead-lettered (``missing_field`` / ``wrong_type``), as it always was.
* ``impute``: an absent or null value is replaced by the declared ``impute``
  value *before* the mechanism. The value must lie in the field's domain
  (checked here, at config load), so the imputed record is one the field
  could have carried: the release decision and the output shape are those of
  a present value, and the output is the mechanism's, with the same epsilon.
* ``null``: the field is released as JSON null where the value is absent or
  null. Whether it was present is then public (docs/protection.md); with a
  per-subject guarantee (``privacy.subject``) the config must say so with
  ``presence_public: true``.

These checks read the field models by attribute only (no import of
``privstream.config.fields``, which calls them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from privstream.config import timestamps

OnMissing = Literal["dead_letter", "impute", "null"]
#: the options added with ``on_missing`` (and a real field's ``spread`` and ``target``, added
#: later); a release id leaves them out at their defaults
#: (``privstream.pipeline.plan.release_id``), so existing configs keep their noise
MISSING_DEFAULTS: dict[str, object] = {
    "on_missing": "dead_letter",
    "impute": None,
    "presence_public": False,
    "presence_epsilon": None,
    "spread": None,
    "target": "mean",
}
#: the output key of a field's presence bit (``presence_epsilon``)
PRESENCE_SUFFIX = "_present"


def presence_name(name: str) -> str:
    """The output key of field ``name``'s randomized-response presence bit."""
    return name + PRESENCE_SUFFIX


def _number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float)


def _numbers(value: object, length: int) -> bool:
    return isinstance(value, list) and len(value) == length and all(map(_number, value))


def impute_problem(spec: Any, value: object) -> str | None:
    """Why ``value`` is not a value of the field's domain, or None if it is."""
    kind = spec.kind
    if kind in ("real", "integer"):
        return _scalar_problem(kind, spec.bounds, value)
    if kind == "categorical":
        return _categorical_problem(spec, value)
    if kind == "boolean":
        return None if isinstance(value, bool) else "a boolean field imputes true or false"
    if kind == "set":
        return _set_problem(spec, value)
    if kind == "timestamp":
        return _timestamp_problem(spec, value)
    if kind == "vector":
        if not _numbers(value, spec.dimension):
            return f"a vector field imputes an array of {spec.dimension} numbers"
        norm = math.sqrt(math.fsum(float(v) ** 2 for v in value))  # type: ignore[attr-defined]
        if norm > spec.l2_bound:
            return f"its L2 norm {norm:g} is above l2_bound {spec.l2_bound:g}"
        return None
    if kind == "functional" and not _numbers(value, len(spec.grid)):
        return (
            f"a functional field imputes an array of {len(spec.grid)} numbers (one per grid point)"
        )
    return None


def _scalar_problem(kind: str, bounds: tuple[float, float], value: object) -> str | None:
    whole = kind == "integer"
    if not _number(value) or (whole and not float(value).is_integer()):  # type: ignore[arg-type]
        return f"a {kind} field imputes a {'whole ' if whole else ''}number"
    lower, upper = bounds
    if not lower <= float(value) <= upper:  # type: ignore[arg-type]
        return f"it lies outside the bounds [{lower:g}, {upper:g}]; impute a value inside"
    return None


def _categorical_problem(spec: Any, value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return "a categorical field imputes a string or an integer"
    if spec.domain is None:
        return None if isinstance(value, str) else "a field without a domain imputes a string"
    if (type(value), value) not in {(type(v), v) for v in spec.domain}:
        return "it is not in the domain; impute one of the domain values"
    return None


def _set_problem(spec: Any, value: object) -> str | None:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return "a set field imputes an array of strings"
    if not set(value) <= set(spec.universe):
        return "an item is not in the universe; impute items of the universe"
    if len(set(value)) > spec.max_items:
        return f"it has {len(set(value))} distinct items, above max_items {spec.max_items}"
    return None


def _timestamp_problem(spec: Any, value: object) -> str | None:
    if isinstance(value, str):
        try:
            instant = timestamps.parse_iso(value, assume_utc=spec.assume_utc)
        except timestamps.BadTimestamp as exc:
            return f"a timestamp field imputes ISO 8601 text or an epoch number: {exc}"
    elif _number(value) and math.isfinite(value):  # type: ignore[arg-type]
        instant = timestamps.epoch_us(value, spec.epoch_unit)  # type: ignore[arg-type]
    else:
        return "a timestamp field imputes ISO 8601 text or an epoch number"
    lower, upper = spec.unit_bounds
    if not lower <= instant // spec.unit_us <= upper:
        return "it lies outside the field's bounds; impute a time inside them"
    return None


def stand_in(spec: Any) -> object:
    """The raw value an absent or null value is parsed as: ``impute``, or under ``null`` a
    fixed in-domain value whose noised release is computed and never written."""
    if spec.on_missing == "impute":
        return spec.impute
    kind = spec.kind
    if kind in ("real", "integer"):
        lower = spec.bounds[0]
        return int(lower) if kind == "integer" else float(lower)
    if kind == "categorical":
        return "" if spec.domain is None else spec.domain[0]
    if kind == "boolean":
        return False
    if kind == "set":
        return []
    if kind == "timestamp":  # the earliest time released (bounds are checked ISO text)
        return 0 if spec.bounds is None else spec.bounds[0]
    size = spec.dimension if kind == "vector" else len(spec.grid)
    return [0.0] * size


def missing_problem(spec: Any) -> str | None:
    """What is wrong with one noised field's missing-value options, or None."""
    if spec.on_missing == "impute":
        if getattr(spec, "kind", "") == "timestamp" and spec.epsilon is None:
            return (
                "on_missing: impute on a timestamp without epsilon would release the "
                "imputed time as is, where it shows that the time was missing; use "
                "on_missing: null (presence public), or give epsilon and bounds"
            )
        if spec.impute is None:
            return "on_missing: impute needs impute: <value>, a value of the field's domain"
        problem = impute_problem(spec, spec.impute)
        if problem is not None:
            return f"impute {spec.impute!r}: {problem}"
    elif spec.impute is not None:
        return "impute applies to on_missing: impute only; set it or remove impute"
    if spec.presence_epsilon is not None and spec.on_missing != "impute":
        return "presence_epsilon applies to on_missing: impute only; remove it"
    if spec.presence_public and spec.on_missing != "null":
        return "presence_public applies to on_missing: null only; remove it"
    memo = getattr(spec, "memoize_by", None) is not None or getattr(spec, "memo_identity", None)
    if spec.on_missing != "dead_letter" and memo:
        return (
            f"on_missing: {spec.on_missing} is not supported on a memoized field; "
            "use on_missing: dead_letter or remove memo_identity/memoize_by"
        )
    return None


def presence_problems(fields: Sequence[Any], subject: str | None) -> list[tuple[int, str]]:
    """(position, message) of each presence bit whose key another field takes, and of each
    ``on_missing: null`` field whose public presence the config has not declared when it
    gives a per-subject guarantee."""
    names = {spec.name for spec in fields}
    taken = [
        (
            position,
            f"presence_epsilon releases the presence bit as {presence_name(spec.name)!r}, "
            "which another field already names; rename that field",
        )
        for position, spec in enumerate(fields)
        if getattr(spec, "presence_epsilon", None) is not None and presence_name(spec.name) in names
    ]
    if subject is None:
        return taken
    return taken + [
        (
            position,
            f"on_missing: null releases whether field {spec.name!r} is present in the clear, "
            f"outside the per-subject guarantee of privacy.subject {subject!r}; set "
            "presence_public: true if its presence is not personal, or use on_missing: impute",
        )
        for position, spec in enumerate(fields)
        if getattr(spec, "on_missing", "dead_letter") == "null" and not spec.presence_public
    ]

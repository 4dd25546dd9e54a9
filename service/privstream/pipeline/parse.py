"""Parse one raw record into the plan's values: strict stdlib JSON, memo identities, tokens.

``parse_row`` is what both paths run on a record the fast path
(``privstream.pipeline.batch``) does not vouch for, and what the reference
(``privstream.pipeline.reference``) runs on every record: the rules for
invalid JSON, missing fields, memo identities and message keys live here once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from privstream.config.paths import split_path
from privstream.errors import MisuseError
from privstream.pipeline.columns import MISSING
from privstream.pipeline.handlers import FieldHandler, Rejected, json_type
from privstream.pipeline.long_integers import digit_bound, parse_int
from privstream.pipeline.missing import takes_missing
from privstream.pipeline.nesting import lookup, source_path
from privstream.pipeline.plan import MemoPlan, RecordPlan, field_identity, unkeyed


def _reject_constant(token: str) -> float:
    # NaN / Infinity are not JSON; accepting them would let them reach public fields
    raise Rejected("invalid_json", f"not valid JSON: non-standard token {token}")


def _float(token: str) -> float:
    # 1e999 is a JSON number beyond the double range: +-inf here; noised scalars clamp it
    # (``clamped_number``), every other place refuses it (public fields, vectors)
    return float(token)


def decode_record(raw: bytes) -> dict[str, Any]:
    """Strict JSON object decoding; raises Rejected with a reason."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected("invalid_utf8", "message is not valid UTF-8") from None
    # an integer longer than the bound is never converted (``long_integers``): the hook
    # decides by its digit count; a shorter message holds none, and keeps the stdlib's int
    long = parse_int if len(raw) > digit_bound() else None
    try:
        obj = json.loads(text, parse_constant=_reject_constant, parse_float=_float, parse_int=long)
    except (ValueError, RecursionError) as exc:
        position = f" at char {exc.pos}" if isinstance(exc, json.JSONDecodeError) else ""
        raise Rejected("invalid_json", f"not valid JSON{position}") from None
    if not isinstance(obj, dict):
        raise Rejected("not_object", f"expected a JSON object, got {json_type(obj)}")
    return obj


def _memo_value(record: dict[str, Any], memo: str, of: str) -> str | int:
    """The raw memo value (a device id): a JSON string or integer, never quoted in errors."""
    value = lookup(record, split_path(memo), memo)
    if value is MISSING:
        raise Rejected("missing_field", f"field {memo!r} (memoize_by of {of!r}): missing")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise Rejected(
            "wrong_type",
            f"field {memo!r} (memoize_by of {of!r}): expected a string or an integer, "
            f"got {json_type(value)}",
        )
    return value


def missing_key(of: str) -> Rejected:
    """A record without a message key, for a field memoized by the message key."""
    return Rejected(
        "missing_key",
        f"field {of!r} is memoized by the Kafka message key and the record has none; "
        "the collector must key every record with the device's authenticated identity",
    )


def _identity(memo: MemoPlan, record: dict[str, Any], key: bytes | None, of: str) -> bytes:
    if memo.field is not None:
        return field_identity(_memo_value(record, memo.field, of))
    if not key:  # None or empty: no device behind it
        raise missing_key(of)
    return key


def parse_field(handler: FieldHandler, record: dict[str, Any]) -> Any:
    """The handler's parse of the record's value at its path (``nesting.lookup``); an absent
    field is dead-lettered unless the field takes absent values (``on_missing``:
    ``privstream.pipeline.missing``)."""
    value = lookup(record, source_path(handler), handler.name)
    if value is MISSING and not takes_missing(handler):
        raise Rejected("missing_field", f"field {handler.name!r}: missing")
    return handler.parse(value)


def parse_row(
    plan: RecordPlan, raw: bytes, key: bytes | None = None
) -> tuple[list[Any], list[bytes]]:
    """Parsed values, one per handler, and the memo token of each memoized one (else b"").

    ``key`` is the record's Kafka message key (the identity of fields memoized
    by it); the plan must be ``unkeyed`` when records have no keys at all.
    """
    record = decode_record(raw)
    row: list[Any] = []
    tokens: list[bytes] = []
    for planned in plan.fields:
        handler, memo = planned.handler, planned.memo
        parsed = parse_field(handler, record)
        row.append(parsed)
        if memo is None:
            tokens.append(b"")
        else:
            tokens.append(memo.token(_identity(memo, record, key, handler.name), parsed))
    return row, tokens


def with_keys(
    plan: RecordPlan, messages: Sequence[bytes], keys: Sequence[bytes | None] | None
) -> tuple[RecordPlan, Sequence[bytes | None]]:
    """The plan and one key per message; no keys at all (file mode) unmemoizes key memos."""
    if keys is None:
        return unkeyed(plan), [None] * len(messages)
    if len(keys) != len(messages):
        raise MisuseError(f"{len(keys)} keys for {len(messages)} messages")
    return plan, keys

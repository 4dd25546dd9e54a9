"""The reference batch transform: strict stdlib JSON, one record at a time.

``process_batch_reference`` is the specification ``process_batch``
(``privstream.pipeline.batch``) must match byte for byte, and the fallback the
fast path hands every record it does not vouch for (via ``parse_row``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MisuseError
from privstream.mechanisms import NoiseSource
from privstream.mechanisms.rng import SplicedSource
from privstream.pipeline.handlers import Column, Rejected, json_type
from privstream.pipeline.long_integers import digit_bound, parse_int
from privstream.pipeline.noise import Fresh, NoiseProvider
from privstream.pipeline.plan import MemoPlan, RecordPlan, field_identity, unkeyed
from privstream.pipeline.results import BatchResult, DeadLetter, Observation


def _reject_constant(token: str) -> float:
    # NaN / Infinity are not JSON; accepting them would let them reach public fields
    raise Rejected("invalid_json", f"not valid JSON: non-standard token {token}")


def _float(token: str) -> float:
    # 1e999 is a JSON number beyond the double range: +-inf here; noised scalars clamp it
    # (``clamped_number``), every other place refuses it (public fields, vectors)
    return float(token)


def _as_list(value: object) -> list[Any]:
    """A released vector row (a float64 array) is written as the list of its floats."""
    if isinstance(value, np.ndarray):
        return cast(list[Any], value.tolist())
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


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
    if memo not in record:
        raise Rejected("missing_field", f"field {memo!r} (memoize_by of {of!r}): missing")
    value = record[memo]
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
        if handler.name not in record:
            raise Rejected("missing_field", f"field {handler.name!r}: missing")
        parsed = handler.parse(record[handler.name])
        row.append(parsed)
        if memo is None:
            tokens.append(b"")
        else:
            tokens.append(memo.token(_identity(memo, record, key, handler.name), parsed))
    return row, tokens


def memo_source(provider: NoiseProvider, memo: MemoPlan, tokens: Sequence[bytes]) -> NoiseSource:
    """A memoized column's words: identity-only words first (a hash seed), then value words."""
    words = provider.for_memo(memo.scope, tokens)
    if not memo.identity_words:
        return words
    seeds = provider.for_memo(memo.seed_scope, [memo.identity_of(t) for t in tokens])
    return SplicedSource(seeds, memo.identity_words, words)


def with_keys(
    plan: RecordPlan, messages: Sequence[bytes], keys: Sequence[bytes | None] | None
) -> tuple[RecordPlan, Sequence[bytes | None]]:
    """The plan and one key per message; no keys at all (file mode) unmemoizes key memos."""
    if keys is None:
        return unkeyed(plan), [None] * len(messages)
    if len(keys) != len(messages):
        raise MisuseError(f"{len(keys)} keys for {len(messages)} messages")
    return plan, keys


def release_columns(
    plan: RecordPlan,
    provider: NoiseProvider,
    good: NDArray[np.int64],
    columns: Sequence[Sequence[Any]],
    tokens: Sequence[Sequence[bytes]],
    observations: dict[str, Observation],
) -> list[Column]:
    """Each parsed column through its handler's mechanism; records the observations.

    ``good`` holds the input positions of the rows, ``tokens[j]`` the memo token of
    every row of column ``j`` (read only where the field is memoized).
    """
    released: list[Column] = []
    for j, planned in enumerate(plan.fields):
        handler, memo = planned.handler, planned.memo
        if memo is None:
            source = provider.for_column(planned.release_id, good)
        else:  # memoized: each row's words are a function of its (identity, true value)
            source = memo_source(provider, memo, tokens[j])
        column = handler.release(columns[j], source)
        released.append(column)
        if handler.mechanism is not None:  # never the error: y is public (canary.py)
            observations[handler.name] = Observation(column.clamped)
    return released


def process_batch_reference(
    plan: RecordPlan,
    messages: Sequence[bytes],
    noise: NoiseProvider | NoiseSource,
    keys: Sequence[bytes | None] | None = None,
) -> BatchResult:
    """The plain per-record transform ``process_batch`` must match byte for byte.

    Stdlib JSON in and out, one record at a time. Kept as the specification
    of the fast path (the tests compare the two on the fuzz corpus) and as
    its fallback for every record the fast path does not vouch for.
    """
    provider: NoiseProvider = noise if isinstance(noise, NoiseProvider) else Fresh(noise)
    plan, keys = with_keys(plan, messages, keys)
    result = BatchResult()
    rows: list[list[Any]] = []
    tokens: list[list[bytes]] = []
    for index, raw in enumerate(messages):
        try:
            row, row_tokens = parse_row(plan, raw, keys[index])
        except Rejected as rejected:
            result.dead_letters.append(DeadLetter(index, rejected.reason, rejected.detail))
        else:
            rows.append(row)
            tokens.append(row_tokens)
            result.output_index.append(index)
    if not rows:
        return result
    good = np.asarray(result.output_index, dtype=np.int64)
    width = range(len(plan.handlers))
    released = release_columns(
        plan,
        provider,
        good,
        [[row[j] for row in rows] for j in width],
        [[t[j] for t in tokens] for j in width],
        result.observations,
    )
    columns = [column.values for column in released]
    names = [handler.name for handler in plan.handlers]
    for i in range(len(rows)):
        record = {name: column[i] for name, column in zip(names, columns, strict=True)}
        text = json.dumps(record, separators=(",", ":"), default=_as_list)
        result.outputs.append(text.encode())
    return result

"""The pure columnar batch transform: raw JSON messages in, sanitized out.

No Kafka, no files: the worker, ``privstream sanitize``, tests and
benchmarks all call ``process_batch``. Fail-closed by construction: the
output object is built from the plan's handlers only, so a field the config
does not name can never pass through, and a record with any problem is
dead-lettered whole.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.mechanisms import NoiseSource
from service.pipeline.fields import Rejected, json_type
from service.pipeline.noise import Fresh, NoiseProvider
from service.pipeline.plan import RecordPlan


@dataclass(frozen=True)
class DeadLetter:
    """A record that could not be sanitized. ``detail`` never quotes raw values."""

    index: int
    reason: str
    detail: str


@dataclass(frozen=True)
class Observation:
    """What the worker may aggregate about one noised field of a batch (metrics)."""

    #: ``rho(Y, d)`` per released value, a function of the noise alone; None when the
    #: kind has no such function or the field is memoized (its noise follows the value)
    error: NDArray[np.float64] | None
    clamped: int


def merge_observations(parts: Sequence[dict[str, Observation]]) -> dict[str, Observation]:
    """The observations of several batches as if they were one."""
    merged: dict[str, Observation] = {}
    for part in parts:
        for name, seen in part.items():
            if name not in merged:
                merged[name] = seen
                continue
            before = merged[name]
            errors = [e for e in (before.error, seen.error) if e is not None]
            error = np.concatenate(errors) if errors else None
            merged[name] = Observation(error, before.clamped + seen.clamped)
    return merged


@dataclass(frozen=True)
class BatchResult:
    """Sanitized messages with their input positions, the dead letters, per-field observations."""

    outputs: list[bytes] = field(default_factory=list)
    output_index: list[int] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    #: by field name, for every field with a mechanism
    observations: dict[str, Observation] = field(default_factory=dict)


def _reject_constant(token: str) -> float:
    # NaN / Infinity are not JSON; accepting them would let them reach public fields
    raise Rejected("invalid_json", f"not valid JSON: non-standard token {token}")


def _finite_float(token: str) -> float:
    # 1e999 parses to inf, which is not JSON either and would reach public fields
    number = float(token)
    if not math.isfinite(number):
        raise Rejected("not_finite", "a number is beyond the double range")
    return number


def decode_record(raw: bytes) -> dict[str, Any]:
    """Strict JSON object decoding; raises Rejected with a reason."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Rejected("invalid_utf8", "message is not valid UTF-8") from None
    try:
        obj = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
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


def _parse_row(plan: RecordPlan, raw: bytes) -> tuple[list[Any], list[bytes]]:
    """Parsed values, one per handler, and the memo token of each memoized one (else b"")."""
    record = decode_record(raw)
    row: list[Any] = []
    tokens: list[bytes] = []
    for handler, memo in zip(plan.handlers, plan.memos, strict=True):
        if handler.name not in record:
            raise Rejected("missing_field", f"field {handler.name!r}: missing")
        parsed = handler.parse(record[handler.name])
        row.append(parsed)
        if memo is None:
            tokens.append(b"")
        else:
            tokens.append(memo.token(_memo_value(record, memo.field, handler.name), parsed))
    return row, tokens


def process_batch(
    plan: RecordPlan, messages: Sequence[bytes], noise: NoiseProvider | NoiseSource
) -> BatchResult:
    """Sanitize a batch. Every input index ends up in exactly one of the two outputs.

    ``noise`` is a provider (fresh or replayable, ``service.pipeline.noise``)
    or a plain source, which then serves every column.
    """
    provider: NoiseProvider = noise if isinstance(noise, NoiseProvider) else Fresh(noise)
    result = BatchResult()
    rows: list[list[Any]] = []
    tokens: list[list[bytes]] = []
    for index, raw in enumerate(messages):
        try:
            row, row_tokens = _parse_row(plan, raw)
        except Rejected as rejected:
            result.dead_letters.append(DeadLetter(index, rejected.reason, rejected.detail))
        else:
            rows.append(row)
            tokens.append(row_tokens)
            result.output_index.append(index)
    if not rows:
        return result
    good = np.asarray(result.output_index, dtype=np.int64)
    columns = []
    for j, (field_id, handler, memo) in enumerate(
        zip(plan.field_ids, plan.handlers, plan.memos, strict=True)
    ):
        if memo is None:
            source = provider.for_column(field_id, good)
        else:  # memoized: each row's words are a function of its (memo, true value) token
            source = provider.for_memo(memo.scope, [t[j] for t in tokens])
        column = handler.release([row[j] for row in rows], source)
        columns.append(column.values)
        if handler.mechanism is not None:
            error = column.error if memo is None else None
            result.observations[handler.name] = Observation(error, column.clamped)
    names = [handler.name for handler in plan.handlers]
    for i in range(len(rows)):
        record = {name: column[i] for name, column in zip(names, columns, strict=True)}
        result.outputs.append(json.dumps(record, separators=(",", ":")).encode())
    return result

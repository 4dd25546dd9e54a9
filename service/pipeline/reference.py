"""The reference batch transform: strict stdlib JSON, one record at a time.

``process_batch_reference`` is the specification ``process_batch``
(``service.pipeline.batch``) must match byte for byte, and the fallback the
fast path hands every record it does not vouch for (via ``parse_row``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.mechanisms import NoiseSource
from service.pipeline.fields import Rejected, json_type
from service.pipeline.noise import Fresh, NoiseProvider
from service.pipeline.plan import RecordPlan
from service.pipeline.results import BatchResult, DeadLetter, Observation


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


def parse_row(plan: RecordPlan, raw: bytes) -> tuple[list[Any], list[bytes]]:
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


def release_columns(
    plan: RecordPlan,
    provider: NoiseProvider,
    good: NDArray[np.int64],
    columns: Sequence[Sequence[Any]],
    tokens: Sequence[Sequence[bytes]],
    observations: dict[str, Observation],
) -> list[list[Any]]:
    """Each parsed column through its handler's mechanism; records the observations.

    ``good`` holds the input positions of the rows, ``tokens[j]`` the memo token of
    every row of column ``j`` (read only where the field is memoized).
    """
    released: list[list[Any]] = []
    for j, (release, handler, memo) in enumerate(
        zip(plan.release_ids, plan.handlers, plan.memos, strict=True)
    ):
        if memo is None:
            source = provider.for_column(release, good)
        else:  # memoized: each row's words are a function of its (memo, true value) token
            source = provider.for_memo(memo.scope, tokens[j])
        column = handler.release(columns[j], source)
        released.append(column.values)
        if handler.mechanism is not None:  # never the error: y is public (canary.py)
            observations[handler.name] = Observation(column.clamped)
    return released


def process_batch_reference(
    plan: RecordPlan, messages: Sequence[bytes], noise: NoiseProvider | NoiseSource
) -> BatchResult:
    """The plain per-record transform ``process_batch`` must match byte for byte.

    Stdlib JSON in and out, one record at a time. Kept as the specification
    of the fast path (the tests compare the two on the fuzz corpus) and as
    its fallback for every record the fast path does not vouch for.
    """
    provider: NoiseProvider = noise if isinstance(noise, NoiseProvider) else Fresh(noise)
    result = BatchResult()
    rows: list[list[Any]] = []
    tokens: list[list[bytes]] = []
    for index, raw in enumerate(messages):
        try:
            row, row_tokens = parse_row(plan, raw)
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
    columns = release_columns(
        plan,
        provider,
        good,
        [[row[j] for row in rows] for j in width],
        [[t[j] for t in tokens] for j in width],
        result.observations,
    )
    names = [handler.name for handler in plan.handlers]
    for i in range(len(rows)):
        record = {name: column[i] for name, column in zip(names, columns, strict=True)}
        result.outputs.append(json.dumps(record, separators=(",", ":")).encode())
    return result

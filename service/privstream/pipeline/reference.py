"""The reference batch transform: strict stdlib JSON, one record at a time.

``process_batch_reference`` is the specification ``process_batch``
(``privstream.pipeline.batch``) must match byte for byte: it parses each record
with ``privstream.pipeline.parse.parse_row`` (the fast path's fallback too),
releases the columns with ``privstream.pipeline.release.release_columns`` and
writes each record with ``json.dumps``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from privstream.mechanisms import NoiseSource
from privstream.pipeline.handlers import Rejected
from privstream.pipeline.nesting import nest, output_path
from privstream.pipeline.noise import Fresh, NoiseProvider
from privstream.pipeline.parse import parse_row, with_keys
from privstream.pipeline.plan import RecordPlan
from privstream.pipeline.release import release_columns
from privstream.pipeline.results import BatchResult, DeadLetter


def _as_list(value: object) -> list[Any]:
    """A released vector row (a float64 array) is written as the list of its floats."""
    if isinstance(value, np.ndarray):
        return cast(list[Any], value.tolist())
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


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
    paths = [output_path(handler) for handler in plan.handlers]
    for i in range(len(rows)):
        record = nest(paths, [column[i] for column in columns])
        text = json.dumps(record, separators=(",", ":"), default=_as_list)
        result.outputs.append(text.encode())
    return result

"""Records in, per-field accumulators fed: the sanitized stream and the raw truth.

Records are decoded one by one and handed to the accumulators in chunks
(``CHUNK_RECORDS``), so the per-field work is vectorised. Nothing here
raises on bad input: a line that is not a JSON object is counted under a
reason and skipped, a field that is missing or malformed is counted by its
accumulator (its kind's registered estimator, ``privstream.kinds``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from privstream.config.paths import split_path
from privstream.estimate.accumulators import MISSING, Accumulator, Options, Truth
from privstream.estimate.by_kind import estimator_of
from privstream.pipeline import RecordPlan
from privstream.pipeline.columns import MISSING as ABSENT
from privstream.pipeline.handlers import Rejected
from privstream.pipeline.missing import MissingHandler
from privstream.pipeline.nesting import lookup, released, source_path
from privstream.pipeline.parse import parse_field
from privstream.pipeline.plan import PlannedField

CHUNK_RECORDS = 8192


def _reject_constant(token: str) -> float:
    raise ValueError(f"non-standard JSON token {token}")


#: strict JSON: NaN and Infinity are not JSON (one decoder, built once)
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def decode(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """``(object, "")`` or ``(None, reason)``: invalid_utf8, invalid_json, not_object."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "invalid_utf8"
    try:
        obj = _DECODER.decode(text)
    except (ValueError, RecursionError):
        return None, "invalid_json"
    if not isinstance(obj, dict):
        return None, "not_object"
    return obj, ""


#: what an estimate of a field with ``on_missing`` describes (docs/estimating-and-auditing.md)
MISSING_NOTES = {
    "null": (
        "on_missing: null: absent and null values are released as null and skipped "
        "(skipped.null); the estimates describe the records that hold the field, whose "
        "presence is public, and their intervals hold for that subpopulation"
    ),
    "impute": (
        "on_missing: impute: absent and null values were noised as {0!r} like any "
        "other value; the estimates describe every record with those counted as {0!r}"
    ),
}


def accumulator_for(planned: PlannedField, options: Options) -> Accumulator | None:
    """The accumulator of one released field (its kind's estimator), None for public fields."""
    estimator = estimator_of(planned)
    if planned.handler.mechanism is None or estimator is None:
        return None  # released as is: nothing to estimate
    made = estimator(planned.handler, planned.kind, options)
    if isinstance(planned.handler, MissingHandler):
        made.nullable = planned.handler.mode == "null"
        made.notes.append(MISSING_NOTES[planned.handler.mode].format(planned.handler.stand_in))
    if planned.memo is not None and planned.memo.field is not None:
        made.notes.append(
            f"memoize_by {planned.memo.field}: a device's reports repeat one answer, so they "
            "are not independent; the intervals assume one report per device and are too "
            "narrow when devices report several times"
        )
    return made


class StreamAggregate:
    """Accumulators for the released fields of a plan (or those in ``only``)."""

    def __init__(
        self, plan: RecordPlan, options: Options, only: Sequence[str] | None = None
    ) -> None:
        self.plan = plan
        self.options = options
        self.fields: list[Accumulator] = []
        wanted = set(only) if only is not None else None
        for planned in plan.fields:
            if wanted is not None and planned.name not in wanted:
                continue
            made = accumulator_for(planned, options)
            if made is not None:
                self.fields.append(made)
        self.records = 0
        self.skipped: Counter[str] = Counter()
        self._chunk: list[dict[str, Any]] = []
        #: per chunk record: the fields refused for it (released under another id)
        self._refused: list[frozenset[str]] = []

    def add(self, raw: bytes, refused: frozenset[str] = frozenset()) -> None:
        """One sanitized record (a JSON object per line or message); ``refused`` fields of it
        were released under another release id and are not counted (``releases``)."""
        obj, reason = decode(raw)
        if obj is None:
            self.skipped[reason] += 1
            return
        self.add_object(obj, refused)

    def add_object(self, obj: dict[str, Any], refused: frozenset[str] = frozenset()) -> None:
        """One decoded record."""
        self.records += 1
        self._chunk.append(obj)
        self._refused.append(refused)
        if len(self._chunk) >= CHUNK_RECORDS:
            self.flush()

    def skip(self, reason: str) -> None:
        """A record skipped before decoding (e.g. made under another config)."""
        self.skipped[reason] += 1

    def flush(self) -> None:
        chunk, self._chunk = self._chunk, []
        refused, self._refused = self._refused, []
        if not chunk:
            return
        for acc in self.fields:
            records = chunk
            if any(refused):
                records = [r for r, no in zip(chunk, refused, strict=True) if acc.name not in no]
                if len(records) < len(chunk):
                    acc.skipped["other_release"] += len(chunk) - len(records)
            keys = split_path(acc.name)
            if len(keys) == 1:
                acc.add([record.get(acc.name, MISSING) for record in records])
            else:
                acc.add([released(record, keys, MISSING) for record in records])

    def consume(self, lines: Iterable[bytes]) -> None:
        for line in lines:
            if line.strip():
                self.add(line)
        self.flush()


class TruthAggregate:
    """The raw records (``--truth``), parsed as the sanitizer parses them.

    A record the sanitizer would dead-letter (bad JSON, a missing field, a
    wrong type, an unknown category: any field's ``parse`` rejecting it) is
    skipped here too, so the truth describes exactly the records that were
    released.
    """

    def __init__(self, plan: RecordPlan, stream: StreamAggregate) -> None:
        self.plan = plan
        self.truths: dict[str, Truth] = {acc.name: acc.new_truth() for acc in stream.fields}
        self.records = 0
        self.skipped: Counter[str] = Counter()
        self._parsed: dict[str, list[Any]] = {name: [] for name in self.truths}
        self._raw: dict[str, list[Any]] = {name: [] for name in self.truths}
        self._pending = 0

    def add(self, raw: bytes) -> None:
        obj, reason = decode(raw)
        if obj is None:
            self.skipped[reason] += 1
            return
        parsed: dict[str, tuple[Any, Any]] = {}
        try:
            for handler in self.plan.handlers:
                value = parse_field(handler, obj)
                # a null release is no value of the field: the truth skips it as the estimate does
                if handler.name in self.truths and value is not None:
                    given = lookup(obj, source_path(handler), handler.name)
                    absent = given is None or given is ABSENT
                    stood = getattr(handler, "stand_in", given) if absent else given
                    parsed[handler.name] = (value, stood)
        except Rejected as rejected:
            self.skipped[rejected.reason] += 1
            return
        self.records += 1
        for name, (value, raw) in parsed.items():
            self._parsed[name].append(value)
            self._raw[name].append(raw)
        self._pending += 1
        if self._pending >= CHUNK_RECORDS:
            self.flush()

    def flush(self) -> None:
        for name, truth in self.truths.items():
            truth.add(self._parsed[name], self._raw[name])
            self._parsed[name] = []
            self._raw[name] = []
        self._pending = 0

    def consume(self, lines: Iterable[bytes]) -> None:
        for line in lines:
            if line.strip():
                self.add(line)
        self.flush()

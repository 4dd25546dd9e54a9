"""The pure columnar batch transform: raw JSON messages in, sanitized out.

No Kafka, no files: the worker, ``privstream sanitize``, tests and
benchmarks all call ``process_batch``. Fail-closed by construction: the
output object is built from the plan's handlers only, so a field the config
does not name can never pass through, and a record with any problem is
dead-lettered whole.

The fast path and its reference
-------------------------------
``process_batch`` gives the very bytes, output positions, dead-letter reasons
and observations of ``process_batch_reference``
(``privstream.pipeline.reference``, stdlib JSON one record at a time) for every
batch, only faster: the batch is decoded at once (``privstream.pipeline.decode``:
msgspec or orjson), each field is extracted and checked as a whole column here,
and the output text is assembled column-wise (``privstream.pipeline.encode``).
The fast path only *accepts* records; any record it is not sure about (the
decoders refuse it, a value of an unexpected type, a missing field, a number
orjson may have read differently) is handed whole to the reference's
``parse_row``, whose verdict and reason stand. What the decoders accept, the
stdlib accepts with the same value, except (orjson only):

* integers beyond 64 bits, which orjson reads as (correctly rounded) floats:
  floats of magnitude >= 2**63 take the reference path wherever int vs float
  could show;
* nesting deeper than the stdlib's recursion limit: records with many
  brackets take the reference path.

``tests/unit/pipeline/test_fast_path.py`` checks the equivalence on the fuzz corpus.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from privstream.config.paths import split_path
from privstream.mechanisms import NoiseSource
from privstream.pipeline import _columns
from privstream.pipeline.assemble import encode_block, encode_records
from privstream.pipeline.columns import MISSING, Values, direct_column
from privstream.pipeline.decode import Names, collector_paused, decode_batch, reader
from privstream.pipeline.handlers import Rejected
from privstream.pipeline.missing import direct_parts
from privstream.pipeline.nesting import holders, source_path
from privstream.pipeline.noise import Fresh, NoiseProvider, Replayable
from privstream.pipeline.parse import parse_row, with_keys
from privstream.pipeline.plan import RecordPlan, field_identity
from privstream.pipeline.release import release_columns
from privstream.pipeline.results import BatchResult, DeadLetter
from privstream.pipeline.subjects import subject_column, subject_values


def read_names(plan: RecordPlan, subject: str | None) -> list[str | tuple[str, ...]]:
    """Every field the fast path reads from a record: the handlers', memo and subject fields
    (a top-level name, or a nested field's path)."""
    paths = [source_path(handler) for handler in plan.handlers]
    memos = (f.memo for f in plan.fields if f.memo is not None)
    paths.extend(split_path(memo.field) for memo in memos if memo.field is not None)
    names: list[str | tuple[str, ...]] = [keys[0] if len(keys) == 1 else keys for keys in paths]
    if subject is not None:
        names.append(subject)
    return names


def _own_keys(records: list[Any], names: Sequence[str]) -> list[Any]:
    """What ``_columns`` reads ``names`` of the records with: for structs, their members
    (``decode.reader``); for dicts, the decoder's own key objects, where the first record
    has the field.

    orjson hands every dict the same cached key string, so each lookup matches by
    identity instead of comparing the name's bytes (20 ns a reference record of
    150). Same keys by value: same columns.
    """
    if records and type(records[0]) is not dict:
        return [reader(records, name) for name in names]
    own = {key: key for key in records[0]} if records else {}
    return list(map(own.get, names, names))


def _column(records: list[Any], key: Any) -> Sequence[Any]:
    """The field's raw values (``MISSING`` where a record lacks it)."""
    return _columns.column(records, key, MISSING)  # one C loop


def _parse_columns(
    plan: RecordPlan, records: list[Any], cache: dict[tuple[str, ...], Any]
) -> tuple[list[Values], set[int]]:
    """Each field's parsed column, and the rows left to the reference.

    A column is read straight into its array where every record holds the
    common kind of value (``direct_column``); else its parser sees the raw values.
    A nested field is read from the objects holding its last key (``nesting.holders``).
    """
    columns: list[Values] = []
    bad: set[int] = set()
    paths = [source_path(handler) for handler in plan.handlers]
    tops = _own_keys(records, [keys[0] for keys in paths])
    for planned, path, top in zip(plan.fields, paths, tops, strict=True):
        parser, handler = planned.codec.column, planned.handler
        held, wrong = holders(records, path, cache)
        bad.update(wrong)
        key = top if len(path) == 1 else reader(held, path[-1])
        values = direct_column(*direct_parts(parser, handler), held, key)
        if values is None:
            values, rejected = parser(handler, _column(held, key))
            bad.update(rejected)
        columns.append(values)
    return columns, bad


def _as_list(values: Values) -> list[Any]:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


@dataclass
class _Parsed:
    """The parsed columns of a batch's accepted records, in input order."""

    columns: list[Values]
    #: per handler, the memo token of every accepted row (empty list when not memoized)
    tokens: list[list[bytes]]
    output_index: list[int]
    dead_letters: list[DeadLetter]
    #: the subject of every accepted row, when asked for
    subjects: list[bytes | None] | None = None
    #: the decoder's objects and their input positions (``BatchResult.decoded``)
    decoded: tuple[list[Any], list[int]] | None = None


def _parse_batch(
    plan: RecordPlan,
    messages: Sequence[bytes],
    keys: Sequence[bytes | None],
    longest: int | None = None,
    subject: str | None = None,
    reads: Names = (),
) -> _Parsed:
    records, where, slow = decode_batch(messages, longest, [*read_names(plan, subject), *reads])
    decoded = (records, where) if reads else None
    subjects = None
    if subject is not None:
        subjects = subject_values(records, messages, subject, where)
    cache: dict[tuple[str, ...], Any] = {}
    columns, bad = _parse_columns(plan, records, cache)
    memo_values: list[list[bytes] | None] = []
    for memo in (f.memo for f in plan.fields):
        if memo is None:
            memo_values.append(None)
        elif memo.field is None:  # the message key; none or empty -> the reference rejects
            identities = [keys[index] or b"" for index in where]
            bad.update(p for p, key in enumerate(identities) if not key)
            memo_values.append(identities)
        else:
            path = split_path(memo.field)
            held, wrong = holders(records, path, cache)
            bad.update(wrong)
            col = _column(held, reader(held, path[-1]))
            bad.update(p for p, value in enumerate(col) if type(value) not in (str, int))
            memo_values.append([b"" if p in bad else field_identity(v) for p, v in enumerate(col)])
    if bad:  # leave those records to the reference
        slow.extend(where[p] for p in bad)
        slow.sort()
        keep = [p for p in range(len(records)) if p not in bad]
        rows = np.asarray(keep, dtype=np.intp)
        columns = [c[rows] if isinstance(c, np.ndarray) else [c[p] for p in keep] for c in columns]
        memo_values = [None if m is None else [m[p] for p in keep] for m in memo_values]
        subjects = None if subjects is None else [subjects[p] for p in keep]
        where = [where[p] for p in keep]
    tokens: list[list[bytes]] = []
    for planned, values, memo_col in zip(plan.fields, columns, memo_values, strict=True):
        memo = planned.memo
        if memo is None or memo_col is None:
            tokens.append([])
        else:
            parsed = _as_list(values)
            tokens.append([memo.token(m, v) for m, v in zip(memo_col, parsed, strict=True)])
    dead: list[DeadLetter] = []
    recovered: list[tuple[int, list[Any], list[bytes]]] = []
    for index in slow:
        try:
            row, row_tokens = parse_row(plan, messages[index], keys[index])
        except Rejected as rejected:
            dead.append(DeadLetter(index, rejected.reason, rejected.detail))
        else:
            recovered.append((index, row, row_tokens))
    if not recovered:
        return _Parsed(columns, tokens, where, dead, subjects, decoded)
    # a few records only the reference could parse: merge them in input order
    order = sorted(
        [(index, -1, p) for p, index in enumerate(where)]
        + [(index, k, 0) for k, (index, _, _) in enumerate(recovered)]
    )
    merged_columns: list[Values] = []
    merged_tokens: list[list[bytes]] = []
    for j, (values, planned) in enumerate(zip(columns, plan.fields, strict=True)):
        fast = _as_list(values)
        merged_columns.append([fast[p] if k < 0 else recovered[k][1][j] for _, k, p in order])
        if planned.memo is None:
            merged_tokens.append([])
        else:
            merged_tokens.append(
                [tokens[j][p] if k < 0 else recovered[k][2][j] for _, k, p in order]
            )
    if subjects is not None and subject is not None:
        late = subject_column([messages[index] for index, _, _ in recovered], subject)
        subjects = [subjects[p] if k < 0 else late[k] for _, k, p in order]
    output_index = [index for index, _, _ in order]
    return _Parsed(merged_columns, merged_tokens, output_index, dead, subjects, decoded)


def process_batch(
    plan: RecordPlan,
    messages: Sequence[bytes],
    noise: NoiseProvider | NoiseSource,
    keys: Sequence[bytes | None] | None = None,
    *,
    subject: str | None = None,
) -> BatchResult:
    """Sanitize a batch. Every input index ends up in exactly one of the two outputs.

    ``noise`` is a provider (fresh or replayable, ``privstream.pipeline.noise``)
    or a plain source, which then serves every column. ``keys`` are the
    messages' Kafka keys (None for a record without one), the identity of
    fields memoized by the message key; without ``keys`` (file mode) such
    fields are not memoized (``privstream.pipeline.plan.unkeyed``). ``subject``: the
    subject field, whose value per output ``result.subjects`` then holds (from this
    decode: the ledger needs no second one). Same bytes and reasons as
    ``process_batch_reference``, computed column by column.
    """
    return _process(plan, messages, noise, keys, subject, joined=False)


def process_block(
    plan: RecordPlan,
    lines: Sequence[bytes],
    noise: NoiseProvider | NoiseSource,
    reads: Names = (),
) -> BatchResult:
    """``process_batch`` for file mode: the outputs as one text (``result.joined``, each
    followed by a newline; ``result.outputs`` empty), no Python object per record.
    ``reads``: more fields to decode (top-level names), then handed over with the
    decoded objects (``result.decoded``): the aggregates' own."""
    return _process(plan, lines, noise, None, None, joined=True, reads=reads)


def _process(
    plan: RecordPlan,
    messages: Sequence[bytes],
    noise: NoiseProvider | NoiseSource,
    keys: Sequence[bytes | None] | None,
    subject: str | None,
    *,
    joined: bool,
    reads: Names = (),
) -> BatchResult:
    provider: NoiseProvider = noise if isinstance(noise, NoiseProvider) else Fresh(noise)
    plan, keys = with_keys(plan, messages, keys)
    # the worker's provider measured every message for the row seeds: reuse its lengths
    longest = provider.longest(messages) if isinstance(provider, Replayable) else None
    with collector_paused():  # the decoded records live (and die) in there
        parsed = _parse_batch(plan, messages, keys, longest, subject, reads)
    result = BatchResult(
        output_index=parsed.output_index,
        dead_letters=parsed.dead_letters,
        subjects=parsed.subjects,
        decoded=parsed.decoded,
    )
    if not parsed.output_index:
        return result
    count = len(parsed.output_index)
    # distinct input positions in order: as many as messages means all of them
    good = (
        np.arange(count, dtype=np.int64)
        if count == len(messages)
        else np.asarray(parsed.output_index, dtype=np.int64)
    )
    columns = cast(list[Sequence[Any]], parsed.columns)
    released = release_columns(plan, provider, good, columns, parsed.tokens, result.observations)
    if joined:
        return replace(result, joined=encode_block(plan.fields, released, count))
    result.outputs.extend(encode_records(plan.fields, released, count))
    return result

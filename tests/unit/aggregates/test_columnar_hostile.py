"""Hostile input for the batch path (``_bounds.c``, file mode's msgspec decode) against the
record path (``Accumulator``, one record at a time, the subject from the raw line).

Subjects: 64-bit and negative integers (and the strings of their digits: one subject),
integers past 64 bits, strings with NUL bytes and non-ASCII characters, duplicates
across batch boundaries; values NaN and infinite; subjects far over their bounds. File
mode decodes a chunk's aggregate fields by msgspec where it reads them as orjson does;
the tests check that path is taken, and that a line it must not take (a long integer,
a long exponent) gives the same release. Deterministic given hypothesis' examples and
the seeded noise.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from privstream.aggregates import build_aggregates, release
from privstream.aggregates.release import encode_rows
from privstream.aggregates.windows import encode_partial
from privstream.cli import aggregates_file
from privstream.cli.aggregates_file import FILE_WINDOW, FileAggregates
from privstream.kinds import build_plan
from privstream.pipeline.batch import process_block
from privstream.pipeline.decode import field_structs
from privstream.pipeline.subjects import subject_column
from privstream.testing import SeededSource

from tests.support.aggregates import Seeded, aggregates_config, one_plan

_ABSENT = object()
#: subjects the C table must keep apart (or together: ``7`` and ``"7"``, canonical bytes)
USERS = st.sampled_from(
    [
        *(2**63 - 1, -(2**63), 2**64 - 1, -1, 0, 7, "-1", "0", "7", "9223372036854775807"),
        *("a\x00b", "a\x00c", "a", "a\x00", "\x00", "é", "e\u0301", "日本", "𝄞", ""),
        *(2**64, -(2**63) - 1, None, True, 1.5, [1], _ABSENT),
    ]
)
OSES = st.sampled_from(["ios", "android", "web", "linux", 1, None, _ABSENT])
VERSIONS = st.sampled_from(["7.0", "7.1", "日本", "a\x00", 3, -(2**63), 2**63, _ABSENT])
LATENCIES = st.sampled_from([0.5, -20, 130, 50.25, 1e308, -1e308, 2**53 + 1, 1, True, "3"])
FINITE = LATENCIES | st.floats(-50, 150, allow_nan=False, allow_infinity=False)
SPECIALS = FINITE | st.sampled_from([math.nan, math.inf, -math.inf])

BOUNDS = {"records_per_group": 2, "groups_per_subject": 2}
TIGHT = {"records_per_group": 1, "groups_per_subject": 1}
AGGREGATES = [
    {"name": "h", "epsilon": 1.0, "query": "histogram", "field": "os", "contribution": BOUNDS},
    {
        "name": "c",
        "epsilon": 1.0,
        "query": "count",
        "group_by": [{"field": "version"}],
        "select_groups": True,
        "delta": 1e-6,
        "contribution": TIGHT,
    },
    {
        "name": "m",
        "epsilon": 1.0,
        "query": "mean",
        "field": "latency",
        "bounds": [0, 100],
        "group_by": [{"field": "version", "keys": ["7.0", "7.1", "日本", 3, -(2**63)]}],
        "contribution": BOUNDS,
    },
]


@st.composite
def a_record(draw: st.DrawFn, numbers: st.SearchStrategy[Any] = FINITE) -> dict[str, Any]:
    fields = {
        "user": draw(USERS),
        "os": draw(OSES),
        "version": draw(VERSIONS),
        "latency": draw(numbers),
    }
    return {name: value for name, value in fields.items() if value is not _ABSENT}


def _chunks(records: list[dict[str, Any]], cuts: list[int], ascii_only: bool) -> list[list[bytes]]:
    """The records as JSON lines (``\\u`` escapes or raw UTF-8), cut into chunks."""
    lines = [json.dumps(r, ensure_ascii=ascii_only).encode() for r in records]
    bounds = [0, *sorted(c % (len(lines) + 1) for c in cuts), len(lines)]
    return [lines[a:b] for a, b in itertools.pairwise(bounds)]


def _record_path(plans: list[Any], chunks: list[list[bytes]]) -> bytes:
    """One ``Accumulator`` per aggregate fed line by line, as ``run`` reads a line."""
    singles = [plan.accumulator(FILE_WINDOW) for plan in plans]
    for line in (line for chunk in chunks for line in chunk):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        for accumulator in singles:
            accumulator.add(record, subject_column([line], "user")[0])
    partials = [accumulator.partial() for accumulator in singles]
    noise = Seeded(34)
    rows = [r for p, q in zip(plans, partials, strict=True) for r in release(p, q, noise)]
    return encode_rows(rows)


def _file_mode(plans: list[Any], chunks: list[list[bytes]]) -> bytes:
    batched = FileAggregates(plans)
    for chunk in chunks:
        batched.feed(chunk, range(len(chunk)))
    return batched.encoded(Seeded(34))


def _plans() -> list[Any]:
    return build_aggregates(aggregates_config(*AGGREGATES, subject="user"))


@settings(max_examples=120, deadline=None)
@given(
    records=st.lists(a_record(), max_size=120),
    cuts=st.lists(st.integers(0, 10_000), max_size=6),
    ascii_only=st.booleans(),
)
def test_file_mode_structs_keep_what_the_record_path_keeps(
    records: list[dict[str, Any]], cuts: list[int], ascii_only: bool
) -> None:
    """Hostile subjects, subjects repeated across chunks: the same rows, byte for byte;
    a chunk without an unsure line (``_bounds.may_disagree``: a run of 19 digits, an
    exponent of 3) is read from msgspec's structs."""
    plans = _plans()
    chunks = _chunks(records, cuts, ascii_only)
    keys = aggregates_file._top_level_keys(plans)
    for chunk in (chunk for chunk in chunks if chunk):
        unsure = aggregates_file._unsure(chunk)
        assert unsure == [i for i, line in enumerate(chunk) if UNSURE.search(line)]
        assert (aggregates_file._structs(chunk, keys, unsure) is None) == bool(unsure)
    assert _file_mode(plans, chunks) == _record_path(plans, chunks)


#: ``_bounds.may_disagree``'s rule: 19 digits in a run of digits and points, or an
#: exponent of 3 digits (bytes in strings too)
UNSURE = re.compile(rb"(?:[0-9]\.*){18}[0-9]|[eE][+-]?[0-9]{3}")


def _integers(chunk: list[bytes]) -> list[int]:
    """The chunk's integers as the stdlib reads them (exactly, past 64 bits too)."""
    values = [v for line in chunk for v in json.loads(line).values()]
    return [v for v in values if type(v) is int]


def test_a_long_integer_in_a_field_no_aggregate_reads_leaves_the_line_to_orjson() -> None:
    """orjson refuses a line with an integer past the doubles, wherever it is: the line
    enters no aggregate, as in ``run``; msgspec would have read it."""
    plans = _plans()
    keys = aggregates_file._top_level_keys(plans)
    assert keys is not None
    lines = [b'{"user": "u", "os": "ios", "other": 1%s}' % (b"0" * 400)]
    lines += [b'{"user": "u", "os": "web", "other": 18446744073709551616}']  # a float
    lines += [b'{"user": "v", "os": "web"}']
    assert aggregates_file._unsure(lines) == [0, 1]
    assert aggregates_file._structs(lines, keys, [0, 1]) is None
    assert aggregates_file._structs(lines[2:], keys, [])
    assert _file_mode(plans, [lines]) == _record_path(plans, [lines])


def test_a_subject_past_64_bits_is_its_digits_in_both_paths() -> None:
    """orjson reads ``2**64`` as a float; both paths take the subject from the raw line
    (its digits): the three records are one subject's, kept up to its bounds."""
    plans = _plans()
    lines = [b'{"user": 18446744073709551616, "os": "ios"}'] * 3
    lines += [b'{"user": "18446744073709551616", "os": "ios"}']
    assert _file_mode(plans, [lines[:2], lines[2:]]) == _record_path(plans, [lines])


@pytest.mark.parametrize("name", ["h", "c", "m"])
@settings(max_examples=80, deadline=None)
@given(
    records=st.lists(a_record(SPECIALS), max_size=80),
    cuts=st.lists(st.integers(0, 10_000), max_size=5),
)
def test_batches_of_dicts_keep_what_the_record_path_keeps(
    name: str, records: list[dict[str, Any]], cuts: list[int]
) -> None:
    """Dicts handed over directly (NaN and infinities among the values: NaN is no number,
    an infinity is clamped), the subjects read from each record."""
    (spec,) = (a for a in AGGREGATES if a["name"] == name)
    plan = one_plan(spec, subject="user")
    old, new = plan.accumulator("w"), plan.batch_accumulator("w")
    bounds = [0, *sorted(c % (len(records) + 1) for c in cuts), len(records)]
    for a, b in itertools.pairwise(bounds):
        for record in records[a:b]:
            old.add(record)
        new.add_all(records[a:b])
    assert encode_partial(new.partial()) == encode_partial(old.partial())


def test_a_subject_far_over_its_bounds_keeps_its_first_cells_and_records() -> None:
    """One subject, 3,000 records over 3 cells and 40 batches: its first 2 cells (in
    input order), 2 records each; other subjects' records between them unaffected."""
    plan = one_plan(AGGREGATES[0], subject="user")
    acc = plan.batch_accumulator("w")
    oses = ["web", "android", "ios"]
    for batch in range(40):
        acc.add_all(
            [{"user": "hog", "os": oses[(batch + i) % 3]} for i in range(75)]
            + [{"user": f"u{batch}", "os": "ios"}]
        )
    assert acc.partial().counts == {("web",): 2, ("android",): 2, ("ios",): 40}


@settings(max_examples=80, deadline=None)
@given(
    records=st.lists(a_record(), max_size=120),
    cuts=st.lists(st.integers(0, 10_000), max_size=6),
    ascii_only=st.booleans(),
)
def test_the_record_paths_decode_handed_over_keeps_what_the_record_path_keeps(
    records: list[dict[str, Any]], cuts: list[int], ascii_only: bool
) -> None:
    """``process_block(..., reads=)`` decodes each chunk once for both paths: the
    aggregates of the released lines, from its structs, are the record path's."""
    config = aggregates_config(*AGGREGATES, subject="user")
    plan, plans = build_plan(config), build_aggregates(config)
    batched = FileAggregates(plans)
    reads = batched.reads(plan)
    assert reads == ("latency", "os", "user", "version")
    released: list[list[bytes]] = []
    for chunk in _chunks(records, cuts, ascii_only):
        result = process_block(plan, chunk, SeededSource(5), reads)
        kept = [chunk[i] for i in result.output_index]
        if kept and not any(len(str(abs(v))) >= 20 for v in _integers(chunk)):
            assert result.decoded is not None
            handed = aggregates_file._handed(kept, result.output_index, result.decoded, reads)
            assert handed is not None
        batched.feed(chunk, result.output_index, result.decoded)
        released.append(kept)
    assert batched.encoded(Seeded(34)) == _record_path(plans, released)


def test_structs_that_read_a_key_in_part_or_not_at_all_are_not_handed_over() -> None:
    """The record path's structs are taken only where they hold each aggregate field's
    whole value: a nested struct of some of its keys, or no member, is no hand-over."""
    lines = [b'{"user": "u", "os": {"a": 1}, "version": "7.0", "latency": 1}']
    keys = ("latency", "os", "user", "version")
    nested = field_structs(lines, ["user", ("os", "a"), "version", "latency"])
    lacking = field_structs(lines, ["user", "version", "latency"])
    whole = field_structs(lines, list(keys))
    assert nested is not None and lacking is not None and whole is not None
    assert aggregates_file._handed(lines, [0], (nested, [0]), keys) is None
    assert aggregates_file._handed(lines, [0], (lacking, [0]), keys) is None
    assert aggregates_file._handed(lines, [0], (whole, [0]), keys) == whole

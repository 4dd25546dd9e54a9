"""Red team 15c of issue 34's batch path: lines where file mode's msgspec decode (its own,
or the record path's handed over) reads otherwise than orjson, the decoder ``run`` and
``Accumulator`` read with (``cli/aggregates_file.py``: "the aggregates read exactly the
records the record path released that orjson reads").

Each test feeds one chunk to ``FileAggregates`` and, line by line, to the record-at-a-time
``Accumulator`` (orjson; a line it refuses enters no aggregate), and compares the
partials' bytes (no noise, no threshold: exact). As the decoder is chosen per chunk (a
run of 20 digits anywhere sends the chunk to orjson), one record's digits then decide
whether other subjects' records count: the last tests measure that sensitivity break
(HIGH), in ``feed`` and through ``sanitize_stream``. Deterministic.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest
from privstream.aggregates import build_aggregates
from privstream.aggregates.windows import encode_partial
from privstream.cli import aggregates_file
from privstream.cli.aggregates_file import FILE_WINDOW, FileAggregates
from privstream.cli.sanitize import sanitize_stream
from privstream.config import AppConfig
from privstream.kinds import build_plan
from privstream.pipeline.batch import process_block
from privstream.pipeline.subjects import subject_column
from privstream.testing import SeededSource

from tests.support.aggregates import aggregates_config

CORRELATED = {
    "name": "k",
    "epsilon": 1.0,
    "query": "count",
    "correlation": {"by": "home", "degree": 0.5, "max_group": 1},
}
HISTOGRAM = {
    "name": "h",
    "epsilon": 1.0,
    "query": "histogram",
    "field": "os",
    "contribution": {"records_per_group": 1, "groups_per_subject": 1},
}
#: the rest of a line the record path releases (every field of ``FIELDS``)
REST = b'"os": "ios", "version": "7.0", "latency": 5'


def _record_path(plans: list[Any], lines: list[bytes], subject: str | None) -> list[bytes]:
    """Each aggregate's partial, fed line by line as ``run`` reads a line (orjson)."""
    singles = [plan.accumulator(FILE_WINDOW) for plan in plans]
    for line in lines:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        key = subject_column([line], subject)[0] if subject else None
        for accumulator in singles:
            accumulator.add(record, key)
    return [encode_partial(accumulator.partial()) for accumulator in singles]


def _file_mode(config: AppConfig, lines: list[bytes], handed: bool) -> list[bytes]:
    """Each aggregate's partial from ``FileAggregates.feed``: its own decode, or the record
    path's (``process_block(..., reads=)``) handed over."""
    batched = FileAggregates(build_aggregates(config))
    if handed:
        plan = build_plan(config)
        result = process_block(plan, lines, SeededSource(5), batched.reads(plan))
        assert result.output_index == list(range(len(lines)))  # the record path keeps all
        batched.feed(lines, result.output_index, result.decoded)
    else:
        batched.feed(lines, range(len(lines)))
    return [encode_partial(accumulator.partial()) for accumulator in batched._accumulators]


@pytest.mark.parametrize("handed", [False, True])
def test_a_correlated_group_of_a_19_digit_negative_integer_below_int64(handed: bool) -> None:
    """``-9223372036854775809`` has 19 digits: the 20-digit guard passes it to msgspec,
    which reads it exactly (``identity_of``: not writable by orjson, no group, the record
    left out), where orjson reads the float ``-9.223372036854776e18`` (a group, both
    lines in it, the first kept). The record path counts 1, the batch path 0."""
    config = aggregates_config(CORRELATED)
    plans = build_aggregates(config)
    lines = [
        b'{"home": -9223372036854775809, %s}' % REST,
        b'{"home": -9223372036854775810, %s}' % REST,
    ]
    # (red team 15c asserted here that the guard let these lines through to msgspec, the
    # finding's premise; fixed, the guard names both lines, which orjson alone decodes)
    assert aggregates_file._unsure(lines) == [0, 1]
    assert _file_mode(config, lines, handed) == _record_path(plans, lines, None)


@pytest.mark.parametrize("handed", [False, True])
@pytest.mark.parametrize(
    "number", [b"1e999", b"1E309", b"1e0309", b"-1e309", b"[1e400]", b"17976931348623159.9e292"]
)
def test_a_number_past_the_doubles_in_a_field_no_aggregate_reads(
    handed: bool, number: bytes
) -> None:
    """orjson refuses the whole line (``_parse``: it enters no aggregate, as in ``run``);
    msgspec skips the field unread and accepts it, with no run of 20 digits to send the
    chunk to orjson: the batch path counts a record the record path never sees."""
    config = aggregates_config(HISTOGRAM, subject="user")
    plans = build_aggregates(config)
    lines = [b'{"user": "u", %s, "other": %s}' % (REST, number), b'{"user": "v", %s}' % REST]
    assert _file_mode(config, lines, handed) == _record_path(plans, lines, "user")


def _counted(config: AppConfig, lines: list[bytes]) -> int:
    """The records file mode counts over one chunk (every aggregate's count totals)."""
    batched = FileAggregates(build_aggregates(config))
    batched.feed(lines, range(len(lines)))
    return sum(sum(acc.partial().counts.values()) for acc in batched._accumulators)


#: 50 records of 50 subjects (correlated groups): each past the doubles in a field no
#: aggregate reads, or with a distinct 19-digit group below int64 (distinct doubles too)
OTHERS = {
    "h": [b'{"user": "u%d", %s, "other": 1e999}' % (i, REST) for i in range(50)],
    "k": [b'{"home": -9%d0000000000000000, %s}' % (23 + i, REST) for i in range(50)],
}


@pytest.mark.parametrize(("spec", "subject"), [(HISTOGRAM, "user"), (CORRELATED, None)])
def test_one_records_digits_decide_whether_other_subjects_records_count(
    spec: dict[str, Any], subject: str | None
) -> None:
    """The sensitivity the proof claims: adding one subject's one record moves the counts
    by at most its own bound (1 here). The decoder is chosen per chunk: a run of 20 digits
    anywhere in the chunk (here in a string of the added record, a field no aggregate
    reads) sends all of it to orjson, so the fate of 50 other records (the disagreements
    above) flips with that one record: a count change of 50, not 1."""
    config = aggregates_config(spec, **({} if subject is None else {"subject": subject}))
    others = OTHERS[spec["name"]]
    added = b'{"user": "b", "home": "b", %s, "phone": "00441234567890123456"}' % REST
    assert abs(_counted(config, [*others, added]) - _counted(config, others)) <= 1


def test_the_flip_end_to_end_through_sanitize_stream(tmp_path: Path) -> None:
    """The same through file mode's loop (``sanitize_stream``: the record path's decode
    handed over, one chunk): the added record releases, and the histogram's count moves
    by 50 (the 50 lines with a number past the doubles in an unread field)."""
    config = aggregates_config(HISTOGRAM, subject="user")
    plan = build_plan(config)
    added = b'{"user": "b", %s, "phone": "00441234567890123456"}' % REST

    def counted(lines: list[bytes]) -> int:
        batched = FileAggregates(build_aggregates(config))
        dead = str(tmp_path / "dead.jsonl")
        summary = sanitize_stream(plan, lines, io.BytesIO(), dead, SeededSource(5), batched)
        assert summary.records_out == len(lines)  # the record path releases every line
        return sum(sum(acc.partial().counts.values()) for acc in batched._accumulators)

    assert abs(counted([*OTHERS["h"], added]) - counted(OTHERS["h"])) <= 1

"""The batch path (``ColumnAccumulator``) against the record path (``Accumulator``).

``Accumulator.add`` stays the path of ``OpenWindows`` (the worker reads a record at
a time), so it is the oracle: random batches of awkward records (unreadable and
nested fields, missing, boolean, float and too long keys, NaN and infinite values,
subjects that have none), split into batches at random, must give the same partial,
cell order included, so the same partial bytes (``encode_partial``), whatever the
bounds. Deterministic given hypothesis' examples: no noise is drawn.
"""

from __future__ import annotations

import json
import math
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from privstream.aggregates import build_aggregates, release
from privstream.aggregates.columnar import UnitIds
from privstream.aggregates.plan import AggregatePlan
from privstream.aggregates.release import encode_rows
from privstream.aggregates.windows import encode_partial
from privstream.cli.aggregates_file import FILE_WINDOW, FileAggregates
from privstream.config import parse_config
from privstream.errors import MisuseError
from privstream.pipeline.subjects import subject_column

from tests.support.aggregates import FIELDS, Seeded, aggregates_config, one_plan

_ABSENT = object()
USERS = st.sampled_from(["u1", "u2", "u3", 7, "7", "", None, True, 1.5, [1], 2**70, _ABSENT])
KEYS = st.sampled_from(["ios", "android", "web", "linux", True, 1, 0, 1.0, None, "\ud800", _ABSENT])
#: keys JSON cannot write among them: a lone surrogate, integers past 64 bits (red team 14c)
VERSIONS = st.sampled_from(
    [
        *("7.0", "7.1", "7.2", 3, True, "x" * 300, {"a": 1}, _ABSENT),
        *(2**70, 2**64, -(2**63) - 1, 2**64 - 1, "\ud800", "7.0\udfff"),
    ]
)
NUMBERS = st.sampled_from(
    [0.5, -20, 130, 50.25, 99.99, 1, 100, math.nan, math.inf, -math.inf, 2**1100, True, "3"]
) | st.floats(-50, 150)
HOMES = st.sampled_from([1, 2, "1", None, {"b": 2, "a": 1}, _ABSENT])
DEVICES = st.sampled_from([{"os": "ios"}, {"os": "web"}, {"os": 1}, {}, "ios", None, _ABSENT])


@st.composite
def a_record(draw: st.DrawFn) -> dict[str, Any]:
    fields = {
        "user": draw(USERS),
        "os": draw(KEYS),
        "version": draw(VERSIONS),
        "latency": draw(NUMBERS),
        "home": draw(HOMES),
        "device": draw(DEVICES),
    }
    return {name: value for name, value in fields.items() if value is not _ABSENT}


BATCHES = st.lists(st.lists(a_record(), max_size=40), max_size=5)
SUBJECTS = st.sampled_from([b"a", b"b", b"7", None])

BOUNDS = {"records_per_group": 2, "groups_per_subject": 2}
TIGHT = {"records_per_group": 1, "groups_per_subject": 1}
SPECS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "histogram": (
        {"query": "histogram", "field": "os", "contribution": BOUNDS},
        {"subject": "user"},
    ),
    "count by version, select_groups": (
        {
            "query": "count",
            "group_by": [{"field": "version"}],
            "select_groups": True,
            "delta": 1e-6,
            "contribution": TIGHT,
        },
        {"subject": "user"},
    ),
    "mean by declared version": (
        {
            "query": "mean",
            "field": "latency",
            "bounds": [0, 100],
            "group_by": [{"field": "version", "keys": ["7.0", "7.1", 3]}],
            "contribution": BOUNDS,
        },
        {"subject": "user"},
    ),
    "histogram by selected version": (
        {
            "query": "histogram",
            "field": "os",
            "group_by": [{"field": "version"}],
            "select_groups": True,
            "delta": 1e-6,
            "contribution": BOUNDS,
        },
        {"subject": "user"},
    ),
    "count by declared version and os": (
        {
            "query": "count",
            "group_by": [{"field": "version", "keys": ["7.0", "7.1", 3]}, {"field": "os"}],
            "contribution": TIGHT,
        },
        {"subject": "user"},
    ),
    "sum, no bounds": ({"query": "sum", "field": "latency", "bounds": [-10, 100]}, {}),
    "correlated histogram": (
        {
            "query": "histogram",
            "field": "os",
            "correlation": {"by": "home", "degree": 0.5, "max_group": 2},
        },
        {},
    ),
    "density": (
        {
            "query": "density",
            "field": "latency",
            "bounds": [0, 100],
            "grid": [0.0, 25.0, 50.0, 100.0],
            "bandwidth": 8,
            "delta": 1e-6,
            "contribution": BOUNDS,
        },
        {"subject": "user"},
    ),
}


def _plan(name: str) -> AggregatePlan:
    spec, privacy = SPECS[name]
    return one_plan({"name": "a", "epsilon": 1.0, **spec}, **privacy)


def _nested_plan() -> AggregatePlan:
    fields = [
        *FIELDS,
        {"name": "device.os", "kind": "categorical", "domain": ["ios", "web"], "epsilon": 1},
    ]
    data = {
        "kafka": {"input_topic": "raw", "output_topic": "out", "dead_letter_topic": "dlq"},
        "privacy": {"epsilon": 10.0, "delta": 1e-4, "subject": "user"},
        "fields": fields,
        "aggregates": [
            {
                "name": "n",
                "query": "histogram",
                "field": "os",
                "group_by": [{"field": "device.os"}],
                "epsilon": 1.0,
                "contribution": BOUNDS,
            }
        ],
    }
    (plan,) = build_aggregates(parse_config(data))
    return plan


def _same(
    plan: AggregatePlan, batches: list[list[dict[str, Any]]], subjects: list[list[Any]] | None
) -> None:
    old, new = plan.accumulator("w"), plan.batch_accumulator("w")
    for index, batch in enumerate(batches):
        given = None if subjects is None else subjects[index]
        for position, record in enumerate(batch):
            if given is None:
                old.add(record)
            else:
                old.add(record, given[position])
        new.add_all(batch, given)
    expected, got = old.partial(), new.partial()
    assert list(got.counts.items()) == list(expected.counts.items())
    assert list(got.sums.items()) == list(expected.sums.items())
    assert encode_partial(got) == encode_partial(expected)


@pytest.mark.parametrize("name", sorted(SPECS))
@settings(max_examples=150, deadline=None)
@given(batches=BATCHES)
def test_the_batch_path_keeps_the_records_the_record_path_keeps(
    name: str, batches: list[list[dict[str, Any]]]
) -> None:
    _same(_plan(name), batches, None)


@settings(max_examples=150, deadline=None)
@given(batches=BATCHES, data=st.data())
def test_given_subjects_bound_as_in_the_record_path(
    batches: list[list[dict[str, Any]]], data: st.DataObject
) -> None:
    subjects = [data.draw(st.lists(SUBJECTS, min_size=len(b), max_size=len(b))) for b in batches]
    _same(_plan("histogram"), batches, subjects)
    _same(_plan("mean by declared version"), batches, subjects)


@settings(max_examples=100, deadline=None)
@given(batches=BATCHES)
def test_a_nested_group_field_is_read_as_the_record_path_reads_it(
    batches: list[list[dict[str, Any]]],
) -> None:
    _same(_nested_plan(), batches, None)


def test_a_subject_over_its_bounds_keeps_its_first_records_across_batches() -> None:
    acc = _plan("histogram").batch_accumulator("w")
    acc.add_all([{"user": "u", "os": "ios"}] * 3 + [{"user": "u", "os": "web"}])
    acc.add_all([{"user": "u", "os": "android"}, {"user": "u", "os": "web"}] * 2)
    # cells ios and web opened in the first batch; android never (2 groups per subject)
    assert acc.partial().counts == {("ios",): 2, ("web",): 2}


def test_subjects_must_match_the_records_one_for_one() -> None:
    acc = _plan("histogram").batch_accumulator("w")
    with pytest.raises(MisuseError, match="2 subjects for 1 records"):
        acc.add_all([{"user": "u", "os": "ios"}], [b"a", b"b"])
    with pytest.raises(MisuseError, match="1 subjects for 2 records"):
        acc.add_all([{"user": "u", "os": "ios"}] * 2, np.zeros(1, np.int64))


def _decoded(line: bytes) -> Any:
    """A line as file mode (and ``run``) parses it: orjson (a long integer read as a
    float), None where orjson refuses it (NaN, Infinity, a lone surrogate): left out."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


@settings(max_examples=100, deadline=None)
@given(batches=BATCHES)
def test_file_mode_releases_what_the_record_path_releases(
    batches: list[list[dict[str, Any]]],
) -> None:
    """The window's accumulators sharing one ``Batch`` and one ``UnitIds`` (file mode),
    against one ``Accumulator`` each fed record by record, the subject read from the raw
    line (``subject_column``): the same rows under the same seeded noise."""
    specs = [("histogram", "h"), ("count by version, select_groups", "c"), ("density", "d")]
    specs += [("mean by declared version", "m")]
    config = aggregates_config(
        *({"name": alias, "epsilon": 1.0, **SPECS[name][0]} for name, alias in specs),
        subject="user",
    )
    plans = build_aggregates(config)
    # the stdlib writes NaN, Infinity, lone surrogates and long integers: lines orjson
    # refuses among them (left out by both)
    chunks = [[json.dumps(record).encode() for record in batch] for batch in batches]
    batched = FileAggregates(plans)
    for chunk in chunks:
        batched.feed(chunk, range(len(chunk)))
    singles = [plan.accumulator(FILE_WINDOW) for plan in plans]
    for line in (line for chunk in chunks for line in chunk):
        record = _decoded(line)
        if record is None:
            continue
        for accumulator in singles:
            accumulator.add(record, subject_column([line], "user")[0])

    def expected() -> bytes:
        partials = [accumulator.partial() for accumulator in singles]
        noise = Seeded(34)
        rows = [row for p, q in zip(plans, partials, strict=True) for row in release(p, q, noise)]
        return encode_rows(rows)

    assert batched.encoded(Seeded(34)) == expected()  # no key JSON cannot write is released


def _held_per_subject(add: Callable[[list[dict[str, Any]]], None], count: int) -> float:
    records = [{"user": f"user-{i:015d}", "os": "ios"} for i in range(count)]
    tracemalloc.start()
    try:
        for start in range(0, count, 2_500):
            add(records[start : start + 2_500])
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return held / count


def test_the_batch_path_holds_less_per_subject_than_the_record_path() -> None:
    """Its id (one dict entry), its cells used (4 bytes) and its pairs (12 bytes each),
    against the record path's set of cells and counter of pairs (measured: about 130
    against 430 bytes for 20-character subjects)."""
    plan = _plan("histogram")
    batched, single = plan.batch_accumulator("w"), plan.accumulator("w")
    per_batch = _held_per_subject(batched.add_all, 10_000)
    per_record = _held_per_subject(single.add_all, 10_000)
    assert per_batch < 256
    assert per_batch < per_record / 2
    assert batched.partial() == single.partial()


def test_unit_ids_are_dense_stable_and_none_is_minus_one() -> None:
    ids = UnitIds()
    assert ids.of([b"b", None, b"a", b"b"]).tolist() == [0, -1, 1, 0]
    assert ids.of([b"c", b"a", b"c", None]).tolist() == [2, 1, 2, -1]
    assert len(ids) == 3

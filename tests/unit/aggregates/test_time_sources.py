"""The time source each aggregate counts under, recorded in the internal topic, and the
refusal of a config that would compare instants of two sources (red team 14b, F1;
docs/proofs/aggregates.md, step 16, "Across time sources")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from privstream.aggregates import KeyedCells, build_aggregates
from privstream.aggregates.plan import AggregatePlan
from privstream.aggregates.stream import OpenWindows, releases
from privstream.aggregates.windows import View, epoch_record, time_record
from privstream.config import parse_config
from privstream.errors import ChangelogError

NOISE = KeyedCells(bytes(32), "raw")
FIELDS: list[dict[str, Any]] = [
    {"name": "at", "kind": "timestamp", "granularity": "1s"},
    {"name": "seen", "kind": "timestamp", "granularity": "1s", "epoch_unit": "ms"},
]
KAFKA = "kafka"
AT = "field:at:s:false"


def _plans(
    *aggregates: tuple[str, str | None], fields: list[dict[str, Any]] = FIELDS
) -> tuple[AggregatePlan, ...]:
    """One count per (name, window.time) pair, 10 s windows."""
    specs = []
    for name, time in aggregates:
        window: dict[str, Any] = {"size_seconds": 10, "grace_seconds": 2}
        if time is not None:
            window["time"] = time
        count = {"name": name, "query": "count", "epsilon": 1.0, "output_topic": "agg"}
        specs.append({**count, "window": window})
    config = {
        "kafka": {"input_topic": "raw", "output_topic": "out", "dead_letter_topic": "dlq"},
        "privacy": {"epsilon": 10.0, "delta": 1e-4},
        "fields": fields,
        "aggregates": specs,
    }
    return build_aggregates(parse_config(config))


def _view(*pairs: tuple[str, str]) -> View:
    view = View()
    view.apply(*epoch_record(0))
    for name, source in pairs:
        view.apply(*time_record(name, source))
    return view


def test_the_time_source_names_the_field_and_how_it_is_parsed() -> None:
    kafka, at, seen = _plans(("k", None), ("a", "at"), ("s", "seen"))
    assert (kafka.time_source, at.time_source) == (KAFKA, AT)
    assert seen.time_source == "field:seen:ms:false"


def test_the_first_close_records_each_time_source_and_nothing_is_released_before() -> None:
    plans = _plans(("k", None), ("a", "at"))
    view = _view()
    windows = OpenWindows(plans, view)
    assert windows.starting  # the worker reads the topic again after the close commits
    record = json.dumps({"at": 1}).encode()
    windows.add(0, 0, 1_000, record, 1_500, misplaced=False)
    for key, value in windows.close(0, 12_500):
        view.apply(key, value)
    assert view.times == {("k", KAFKA), ("a", AT)}
    assert {r.plan.name for r in releases(plans, view, NOISE, 1)} == {"k", "a"}
    view.times.clear()  # a view without the time records: nothing is released
    assert releases(plans, view, NOISE, 1) == []


def test_aggregates_of_two_sources_run_side_by_side() -> None:
    """Not refused, and a topic holding both pairs gets no time record again."""
    plans = _plans(("k", None), ("a", "at"))
    view = _view(("k", KAFKA), ("a", AT))
    windows = OpenWindows(plans, view)
    windows.rebase(view)
    assert not [key for key, _ in windows.close(0, 12_500) if b'"t":"time"' in key]


@pytest.mark.parametrize(
    ("recorded", "config", "names"),
    [
        ([("n", KAFKA)], [("n", "at")], ("'n'", "the Kafka timestamp", "window.time 'at'")),
        ([("n", AT)], [("n", "seen")], ("'n'", "window.time 'at'", "window.time 'seen'")),
        ([("old", KAFKA)], [("new", "at")], ("'new'", "'old', which the config lacks", "Kafka")),
        ([("old", AT)], [("new", None)], ("'new'", "'old'", "the Kafka timestamp")),
        # the documented price: a kept aggregate may have been the lost one's rename
        ([("k", KAFKA), ("a", AT)], [("a", "at")], ("'a'", "'k'", "the Kafka timestamp")),
    ],
)
def test_a_config_comparing_instants_of_two_sources_is_refused(
    recorded: list[tuple[str, str]], config: list[tuple[str, str | None]], names: tuple[str, ...]
) -> None:
    with pytest.raises(ChangelogError, match="Changing the time source") as refused:
        OpenWindows(_plans(*config), _view(*recorded))
    for name in names:
        assert name in str(refused.value)


def test_a_newer_read_holding_another_source_is_refused() -> None:
    """A replica of the other config recorded its source after this session started:
    the next read of the topic (``rebase``) stops it before it releases."""
    plans = _plans(("new", "at"))
    windows = OpenWindows(plans, _view(("new", AT)))
    with pytest.raises(ChangelogError, match="'old', which the config lacks"):
        windows.rebase(_view(("new", AT), ("old", KAFKA)))


def test_how_the_field_is_parsed_is_in_the_release_id() -> None:
    """F2: ``assume_utc`` (as ``epoch_unit``: test_redteam14b.py) moves a record's window,
    so it changes the release and partial ids of an aggregate with ``window.time``."""
    (local,) = _plans(("n", "at"))
    (utc,) = _plans(("n", "at"), fields=[{**FIELDS[0], "assume_utc": True}])
    assert utc.time_source == "field:at:s:true"
    assert local.release_id("count") != utc.release_id("count")
    assert local.partial_id != utc.partial_id

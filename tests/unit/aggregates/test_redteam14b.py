"""Red team 14b (branch i34-land at 7b00afc): ``window.time`` and ``View.foreign_end``.

Failing tests, one per finding; pure (``OpenWindows``, ``releases`` over one ``View``,
the worker's steps replayed as in ``test_starts.py``). No product code is changed here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from privstream.aggregates import KeyedCells, build_aggregates
from privstream.aggregates.plan import AggregatePlan
from privstream.aggregates.stream import OpenWindows, releases
from privstream.aggregates.windows import (
    Start,
    View,
    epoch_record,
    progress_record,
    start_record,
)
from privstream.config import AppConfig, parse_config
from privstream.errors import ChangelogError, ConfigError

NOISE = KeyedCells(bytes(32), "raw")
TEN = {"size_seconds": 10, "grace_seconds": 2}
FIELDS: list[dict[str, Any]] = [
    {"name": "at", "kind": "timestamp", "granularity": "1s"},
    {"name": "at_ms", "kind": "timestamp", "granularity": "1s", "epoch_unit": "ms"},
    {"name": "os", "kind": "public"},
]


def _config(
    name: str, time: str | None, fields: list[dict[str, Any]] = FIELDS, size: dict[str, int] = TEN
) -> AppConfig:
    window: dict[str, Any] = dict(size) if time is None else {**size, "time": time}
    count = {"name": name, "query": "count", "epsilon": 1.0, "output_topic": "agg"}
    return parse_config(
        {
            "kafka": {"input_topic": "raw", "output_topic": "out", "dead_letter_topic": "dlq"},
            "privacy": {"epsilon": 10.0, "delta": 1e-4},
            "fields": fields,
            "aggregates": [{**count, "window": window}],
        }
    )


def _plans(name: str, time: str | None) -> tuple[AggregatePlan, ...]:
    return build_aggregates(_config(name, time))


def _session(
    plans: tuple[AggregatePlan, ...], view: View, records: list[tuple[int, dict[str, Any]]]
) -> set[int]:
    """One session of the worker on partition 0 from offset 0 (the held offset): read
    ``records`` (Kafka time, value) at 1.5 s (a restart: 13 s), close at 12.5 s (32.5 s),
    release what is due. The starts of the released windows holding a record."""
    read_at, close_at = (1_500, 12_500) if not view.progress else (13_000, 32_500)
    windows = OpenWindows(plans, view)
    for offset, (stamp, record) in enumerate(records):
        windows.add(0, offset, stamp, json.dumps(record).encode(), read_at, misplaced=False)
    for key, value in windows.close(0, close_at):
        view.apply(key, value)
    counted = set()
    for done in releases(plans, view, NOISE, 1):
        start = done.end_ms - TEN["size_seconds"] * 1000
        if any(b'"counts":[[' in v for _, v in view.inputs(done.plan.name, start).values()):
            counted.add(start)
        for key, value in done.writes:
            view.apply(key, value)
    return counted


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (("n", None), ("n", "at")),  # one name, the time source changed (every replica stopped)
        (("old", None), ("new", "at")),  # a rename onto a field's time (a rolling deploy)
        (("old", "at"), ("new", None)),  # a rename back onto the Kafka timestamp
        (("old", "at"), ("new", "at")),  # control (passes): one time source, a rename
    ],
)
def test_f1_a_record_is_never_released_twice_across_a_time_source_change(
    old: tuple[str, str | None], new: tuple[str, str | None]
) -> None:
    """HIGH. Step 16 bounds the *instants* a config may release (``foreign_end``, the own
    released end); it assumes a record's instant is the same under every config. With
    ``window.time`` it is not. The victim's time is 1 s under the old source and 21 s under
    the new; offset 0 (15 s under both) holds the committed input offset. The old config
    releases the victim in [0 s, 10 s); after the restart (or the rebalance onto a
    new-config replica) the victim is read again from the held offset and released in
    [20 s, 30 s) under the new source, with fresh noise (another release id), and neither
    config's budget check charges the second release."""
    victim_kafka = 1_000 if old[1] is None else 21_000
    victim_field = 21 if old[1] is None else 1
    records = [
        (15_000, {"os": "a", "at": 15}),
        (victim_kafka, {"os": "a", "at": victim_field}),
    ]
    view = View()
    view.apply(*epoch_record(0))  # a fresh topic: the first window is the epoch's, [0, 10 s)
    first = _session(_plans(*old), view, records)
    assert first == {0}  # the victim, released under the old source
    if old[1] != new[1]:  # the fix: the session under the new source is refused at start
        with pytest.raises(ChangelogError, match="Changing the time source"):
            _session(_plans(*new), view, records)
        return
    second = _session(_plans(*new), view, records)
    assert 20_000 not in second, "the victim was released again under the new time source"


def test_f2_the_time_fields_epoch_unit_is_part_of_the_time_source() -> None:
    """LOW. Step 22: "the time source is in the release id ... after a change of
    window.time a partial committed under the old source is never merged". The id hashes
    the field's *name* only: changing the field's ``epoch_unit`` (or ``assume_utc``)
    reinterprets every record's time under the same partial id, so partials counted under
    seconds are merged with ones counted under milliseconds, and ``changed`` logs nothing."""
    seconds = [dict(f) for f in FIELDS]
    millis = [dict(f) for f in FIELDS]
    millis[0]["epoch_unit"] = "ms"
    (a,) = build_aggregates(_config("n", "at", seconds))
    (b,) = build_aggregates(_config("n", "at", millis))
    assert a.time != b.time  # the records' windows differ ...
    assert a.partial_id != b.partial_id  # ... so the plans must


def _victim_counted(first_readable: bool) -> int:
    """A name new to the topic; u (offset 0) read at 9.9 s, v (offset 1, field 15 s) read
    in the next batch at 10.1 s; nothing closes in between (a replay, or one step's adds
    before its close). Whether v is counted, by u's field alone."""
    view = View()
    view.apply(*epoch_record(0))
    view.apply(*progress_record("other", 0, 5_000))  # not fresh: the start follows the clock
    windows = OpenWindows(_plans("n", "at"), view)
    u = {"os": "a", "at": 9.95 if first_readable else "not a time"}
    windows.add(0, 0, 0, json.dumps(u).encode(), 9_900, misplaced=False)
    windows.add(0, 1, 0, json.dumps({"os": "a", "at": 15}).encode(), 10_100, misplaced=False)
    for key, value in windows.close(0, 22_000):
        view.apply(key, value)
    return sum(b'"counts":[[' in v for at, v in view.inputs("n", 10_000).values())


def test_f3_a_new_names_first_window_does_not_depend_on_another_records_field() -> None:
    """MEDIUM. ``OpenWindows._first`` is chosen by the wall clock of the first ``add``
    that reaches ``_is_open``: after the record's own time was read. A record without a
    readable ``window.time`` (or a future one) defers it, so u's field decides whether the
    new name starts at 10 s or 20 s, i.e. whether v, and the whole window [10 s, 20 s), is
    counted and released at all (step 19: "none reads another record")."""
    assert _victim_counted(first_readable=True) == _victim_counted(first_readable=False)


#: a proposed bound on one partition's open windows per aggregate (about 10 MB at the
#: ~1 KB each measured for a count; ``close`` and ``held`` walk them all every step)
MAX_OPEN = 10_000


def test_f4_a_producer_cannot_open_a_window_per_second_of_the_grace() -> None:
    """MEDIUM (availability). With ``window.time`` the producer writes each record's time
    (a broker's ``LogAppendTime`` or ``message.timestamp.*`` limits bound a Kafka
    timestamp, never a field): records timed one second apart over a 1-day grace open one
    accumulator each (1 s windows), ~1 KB apiece, and every step's ``close``/``held`` sort
    and scan them all. 7-day grace: ~600 k accumulators per partition and aggregate.
    Nothing in config load bounds ``(grace + future) / size``.

    Adjusted by the fix (i34-fix5): config load now refuses that window (the test's 1-day
    grace over 1 s windows); the spread is replayed at the largest grace 1 s windows
    still allow (``MAX_OPEN - 300 - 1`` s, the 300 s being the future allowance), and
    ``_open`` is now indexed by partition."""
    with pytest.raises(
        ConfigError, match=r"\(n\)\.window.*86400.*limit 10000.*size_seconds at least 9"
    ):
        _config("n", "at", size={"size_seconds": 1, "grace_seconds": 86_400})
    grace = MAX_OPEN - 300 - 1
    second = {"size_seconds": 1, "grace_seconds": grace}
    plans = build_aggregates(_config("n", "at", size=second))
    now = 1_795_000_000_000
    view = View()
    view.apply(*epoch_record(0))
    view.apply(*start_record("n", Start(0, plans[0].partial_id)))  # a running aggregate
    view.apply(*progress_record("n", 0, now - grace * 1000))
    windows = OpenWindows(plans, view)
    for offset in range(MAX_OPEN + 2_000):
        record = {"os": "a", "at": now // 1000 - grace + offset}
        windows.add(0, offset, 0, json.dumps(record).encode(), now, misplaced=False)
    # the accumulators in memory (indexed by partition since the fix)
    assert len(windows._open[0]) <= MAX_OPEN

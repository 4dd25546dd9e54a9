"""Each aggregate's epoch record: a name's windows start where no other name's were released.

Pure: the worker's steps replayed with ``OpenWindows`` and ``releases`` over one ``View``
(docs/proofs/aggregates.md, step 16).
"""

from __future__ import annotations

import json

import orjson
from privstream.aggregates import KeyedCells, build_aggregates
from privstream.aggregates.plan import AggregatePlan
from privstream.aggregates.stream import OpenWindows, Release, releases
from privstream.aggregates.windows import (
    PartialAt,
    Start,
    View,
    encode_partial,
    epoch_record,
    partial_key,
    progress_record,
    released_record,
    start_record,
    time_record,
)

from tests.support.aggregates import aggregates_config

COUNT = {"query": "histogram", "field": "os", "epsilon": 1.0, "output_topic": "a"}
DAY = {**COUNT, "name": "day", "window": {"size_seconds": 86_400, "grace_seconds": 2}}
NOISE = KeyedCells(bytes(32), "raw")


def _plans(name: str, size: int = 10) -> tuple:
    short = {**COUNT, "name": name, "window": {"size_seconds": size, "grace_seconds": 2}}
    return build_aggregates(aggregates_config(DAY, short))


def _session(plans: tuple, view: View, read_at: int, close_at: int) -> list[str]:
    """A restart: the day's window held the offset, so the records at 1 s and 21 s are
    read again (at ``read_at``); the windows close at ``close_at`` and every due window is
    released. The labels released with a record, other than the day's."""
    windows = OpenWindows(plans, view)
    for offset, stamp in enumerate((1_000, 21_000)):
        record = json.dumps({"os": "ios"}).encode()
        windows.add(0, offset, stamp, record, read_at, misplaced=False)
    for key, value in windows.close(0, close_at):
        view.apply(key, value)
    done = releases(plans, view, NOISE, 1)
    # a release over a record: a partial of its plan, for its window, is in the view
    counted = [
        f"{r.plan.name} {r.label}"
        for r in done
        if r.plan.name != "day"
        and any(
            at.plan == r.plan.partial_id for at, _ in view.inputs(r.plan.name, _start(r)).values()
        )
    ]
    for release in done:
        for key, value in release.writes:
            view.apply(key, value)
    return counted


def _start(release: Release) -> int:
    window = release.plan.spec.window
    return release.end_ms - window.size_seconds * 1000


def _view() -> View:
    view = View()
    view.apply(*epoch_record(0))
    return view


def test_a_name_that_comes_back_does_not_release_its_windows_again() -> None:
    view = _view()
    first = ["n 1970-01-01T00:00:00.000Z/10s"]
    assert _session(_plans("n"), view, 12_000, 12_000) == first
    # n2 starts at 20 s and releases the record at 21 s
    assert _session(_plans("n2"), view, 13_000, 32_000) == ["n2 1970-01-01T00:00:20.000Z/10s"]
    assert "n" not in view.starts  # the session without n tombstoned its start
    # n comes back: it starts again past the wall clock, so [20 s, 30 s) is not its again
    assert _session(_plans("n"), view, 33_000, 45_000) == []
    assert view.starts["n"].start == 40_000


def test_a_window_size_changed_under_one_name_never_releases_a_released_record() -> None:
    view = _view()
    assert _session(_plans("n"), view, 12_000, 12_000) == ["n 1970-01-01T00:00:00.000Z/10s"]
    # the record at 1 s is counted in [0, 60 s) again, but that window starts before n's
    # released end: it is never due (``View.due`` starts at the released end, aligned up)
    assert _session(_plans("n", size=60), view, 13_000, 62_000) == []
    assert view.released["n"] == 10_000  # [0, 60 s) skipped: the next due is [60 s, 120 s)


def test_the_aggregates_of_a_new_deployment_start_at_its_epochs_window() -> None:
    view = View()
    view.apply(*epoch_record(25_000))
    windows = OpenWindows(_plans("n"), view)
    windows.add(0, 0, 20_000, json.dumps({"os": "ios"}).encode(), 25_000, misplaced=False)
    for key, value in windows.close(0, 25_000):
        view.apply(key, value)
    assert view.starts["n"].start == 20_000  # nothing closed yet: the epoch's window


def test_a_new_name_starts_past_every_name_s_released_end_and_progress() -> None:
    """Step 16 across names, whatever the clock of the worker that first sees the name."""
    view = View()
    view.apply(*epoch_record(0))
    assert view.last_closed() == 0
    view.apply(*progress_record("old", 0, 40_000))
    view.apply(*released_record("gone", 50_000))  # a name the config lost
    assert view.last_closed() == 50_000
    for key, value in OpenWindows(_plans("new", size=30), view).close(0, 10_000):
        view.apply(key, value)  # a worker whose clock is 40 s behind the released end
    assert view.starts["new"].start == 60_000  # aligned_up(50 s, 30 s), not 30 s


def test_a_close_tombstones_its_partition_s_partials_no_release_will_read() -> None:
    """L1 (red team 13c): partials of a removed name, of a window before the name's
    first, or off its grid after a size change were never due, so never tombstoned."""
    view = View()
    view.apply(*epoch_record(0))
    (day, plan) = _plans("n", size=10)
    view.apply(*start_record("day", Start(0, day.partial_id)))
    view.apply(*start_record("n", Start(100_000, plan.partial_id)))
    stale = [
        PartialAt("gone", "x", 100_000, 0),  # a name the config lacks
        PartialAt("n", plan.partial_id, 90_000, 0),  # before n's first window
        PartialAt("n", "old", 105_000, 0),  # off n's 10 s grid: a 5 s window before
    ]
    kept = [
        PartialAt("n", plan.partial_id, 110_000, 0),  # due later
        PartialAt("n", "old", 120_000, 0),  # due: the release leaves it out, tombstones it
        PartialAt("gone", "x", 100_000, 1),  # another partition's: its own close
    ]
    for at in stale + kept:
        view.apply(partial_key(at), b'{"counts":[],"sums":[]}')
    windows = OpenWindows((day, plan), view)
    # nothing closes yet: the tombstones wait for a close the wall clock schedules (red
    # team 14a: written alone, a transaction would tell that the partition had records)
    assert [key for key, value in windows.close(0, 101_000) if value is None] == []
    writes = windows.close(0, 112_000)  # n's [100 s, 110 s) closes
    tombstones = {key for key, value in writes if value is None}
    assert tombstones == {partial_key(at) for at in stale}


TEN = {"size_seconds": 10, "grace_seconds": 2}


def _rolling_view(new: AggregatePlan) -> View:
    """The internal topic of a rolling deploy renaming ``old`` to ``new`` (10 s windows, one
    partition), in commit order. ``new``'s start (20 s) was chosen from a view in which
    ``old`` had released up to 10 s; an old-config releaser, its clock later and its view
    read before ``new``'s start, then released ``old``'s windows up to 30 s, counting the
    record at 21 s; ``new`` counted it too. Built from the records directly: the proof
    must hold whatever views the starts and releases were chosen from."""
    view = _view()
    view.apply(*start_record("old", Start(0, "o")))
    view.apply(*time_record("old", new.time_source))  # one source: a rename
    view.apply(*progress_record("old", 0, 10_000))
    view.apply(*released_record("old", 10_000))
    view.apply(*start_record("new", Start(20_000, new.partial_id)))
    view.apply(*time_record("new", new.time_source))
    view.apply(*progress_record("old", 0, 30_000))
    view.apply(*released_record("old", 30_000))
    accumulator = new.accumulator("w")
    accumulator.add({"os": "ios"})
    (value,) = encode_partial(accumulator.partial())
    view.apply(partial_key(PartialAt("new", new.partial_id, 20_000, 0)), value)
    view.apply(*progress_record("new", 0, 30_000))
    return view


def test_a_renamed_aggregate_never_releases_a_time_an_old_config_released() -> None:
    """Step 16, two configs at once: a window of a name is never released over a time a
    name the releasing config lacks has released (``View.foreign_end``), whatever the
    clocks and views the starts were chosen with. Here ``new``'s [20 s, 30 s) holds the
    record ``old`` released in its [20 s, 30 s), under another release id, so with fresh
    noise: a second release the budget of neither config counts. It is skipped, and its
    partial tombstoned by the next close; ``new`` goes on from 30 s."""
    (new,) = build_aggregates(aggregates_config({**COUNT, "name": "new", "window": TEN}))
    view = _rolling_view(new)
    assert [r.label for r in releases((new,), view, NOISE, 1)] == []
    writes = OpenWindows((new,), view).close(0, 42_500)  # the next close: [30 s, 40 s)
    keys = [orjson.loads(key) for key, value in writes if value is None]
    assert [key["w"] for key in keys if key["t"] == "partial"] == [20_000]
    assert orjson.loads(progress_record("new", 0, 40_000)[0]) in [
        orjson.loads(key) for key, _ in writes
    ]
    view.apply(*progress_record("new", 0, 40_000))
    assert view.due("new", 10_000, 1, {"new"}) == [30_000]


def test_a_name_the_config_also_holds_is_no_foreign_release() -> None:
    """An added aggregate (the config holds ``old`` and ``new``) is no rename: ``old``'s
    releases bound nothing of ``new``'s, whose first window is released."""
    both = aggregates_config(
        {**COUNT, "name": "new", "window": TEN}, {**COUNT, "name": "old", "window": TEN}
    )
    (new, old) = build_aggregates(both)
    done = releases((new, old), _rolling_view(new), NOISE, 1)
    assert [r.label for r in done if r.plan.name == "new"] == ["1970-01-01T00:00:20.000Z/10s"]


def test_losing_a_shorter_aggregate_skips_the_kept_one_s_open_window() -> None:
    """The documented price of ``View.foreign_end``: ``ten`` (10 s windows) released up to
    30 s beside ``day``; a config holding only ``day`` cannot tell that the config which
    released ``ten`` held ``day`` too, so ``day``'s window holding 0-30 s is skipped."""
    view = _view()
    view.apply(*start_record("day", Start(0, "d")))
    view.apply(*released_record("ten", 30_000))
    view.apply(*progress_record("day", 0, 2 * 86_400_000))
    assert view.due("day", 86_400_000, 1, {"day", "ten"}) == [0, 86_400_000]
    assert view.due("day", 86_400_000, 1, {"day"}) == [86_400_000]

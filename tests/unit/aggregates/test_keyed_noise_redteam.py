"""Red team (session 12): an aggregate's keyed noise must never cancel between two releases
(fixed: the key takes the partial's digest, and the release id the subject).

``KeyedCells`` keys a cell's noise to (release id, window, cell) only, and the release id
hashes the aggregate's own config entry (not ``privacy.subject``, not the record path that
decides which records reach the aggregate). So two releases of one window over *different*
partials (late records, an offset reset, a restart that re-reads the window in another
order, a changed subject field) carry the same noise, and their difference is the exact
difference of the true totals: one subject's contribution in the clear.

Both failed before the fix. Both are deterministic (fixed secret). Once the noise of two
different partials is independent, a false failure of the first needs the two draws to be
equal in all 6 cells: ``P(Z = Z')`` is about 0.13 per cell at ``t = 2`` (eps 0.5), so
below 1e-5 in all.
"""

from __future__ import annotations

from privstream.aggregates import KeyedCells, Partial, release

from tests.support.aggregates import one_plan

SECRET = bytes(range(32))
BY_OS = {
    "name": "by_os",
    "query": "count",
    "group_by": [{"field": "os"}, {"field": "version", "keys": ["1.0", "2.0"]}],
    "epsilon": 0.5,
    "contribution": {"records_per_group": 1, "groups_per_subject": 1},
}


def test_two_releases_of_one_window_over_different_data_do_not_cancel_noise() -> None:
    plan = one_plan(BY_OS, subject="user")
    cells = plan.cells
    before = {cell: 40 for cell in cells}
    # one more subject (the victim) in the window, in the first cell: its only record
    after = dict(before)
    after[cells[0]] += 1
    noise = KeyedCells(SECRET, "raw")
    first = release(plan, Partial("by_os", "2026-11-28T06", before), noise)
    second = release(plan, Partial("by_os", "2026-11-28T06", after), noise)
    differences = [b["value"] - a["value"] for a, b in zip(first, second, strict=True)]
    # before the fix: [1, 0, 0, 0, 0, 0] exactly -- the victim's cell read off without noise
    assert differences != [after[c] - before[c] for c in cells], (
        "the same (release, window, cell) noise was reused over different partials: "
        "the difference of the two releases is the exact difference of the true counts"
    )


def test_the_release_id_changes_with_the_subject_that_bounds_the_contributions() -> None:
    # ``user`` and ``home`` bound contributions differently (other records are kept), so
    # the two configs release different totals for one window: their noise must differ
    by_user = one_plan(BY_OS, subject="user")
    by_home = one_plan(BY_OS, subject="home")
    assert by_user.release_id("count") != by_home.release_id("count")

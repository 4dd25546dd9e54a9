"""An accumulator's memory grows with its subjects by bytes, not kilobytes, per subject."""

from __future__ import annotations

import tracemalloc

from tests.support.aggregates import one_plan

HISTOGRAM = {
    "name": "os_share",
    "query": "histogram",
    "field": "os",
    "epsilon": 1.0,
    "contribution": {"records_per_group": 2, "groups_per_subject": 1},
}
SUBJECTS = 5_000


def test_each_subject_costs_well_under_a_kilobyte() -> None:
    plan = one_plan(HISTOGRAM, subject="user")
    records = [{"user": f"user-{i}", "os": "ios"} for i in range(SUBJECTS)]
    accumulator = plan.accumulator("w")
    tracemalloc.start()
    try:
        accumulator.add_all(records)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # its identity, its set of cells and its count per cell: ~450 bytes (orjson's
    # uncopied bytes alone held 4 KiB per subject)
    assert held / SUBJECTS < 1024
    assert accumulator.partial().counts == {("ios",): SUBJECTS}

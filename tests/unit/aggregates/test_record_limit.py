"""Every internal record a close writes fits ``kafka.max_message_bytes`` (red team 14a, 5)."""

from __future__ import annotations

import json
from typing import Any

from aiokafka.errors import MessageSizeTooLargeError
from privstream.aggregates import build_aggregates, record_problems
from privstream.aggregates.stream import OpenWindows
from privstream.aggregates.windows import View, epoch_record
from privstream.config import AppConfig
from privstream.worker.aggregates import _said

from tests.support.aggregates import aggregates_config

SELECTED = {
    "name": "v",
    "query": "count",
    "group_by": [{"field": "version"}],
    "select_groups": True,
    "epsilon": 1.0,
    "delta": 1e-6,
    "window": {"size_seconds": 10},
    "output_topic": "agg",
}
HISTOGRAM = {
    "name": "h",
    "query": "histogram",
    "field": "os",
    "group_by": [{"field": "version", "keys": [f"v{i}" for i in range(400)]}],
    "epsilon": 1.0,
    "window": {"size_seconds": 10},
    "output_topic": "agg",
}


def _limited(aggregate: dict[str, Any], limit: int) -> AppConfig:
    base = aggregates_config(aggregate)
    kafka = base.kafka.model_copy(update={"max_message_bytes": limit})  # type: ignore[union-attr]
    return base.model_copy(update={"kafka": kafka})


def test_run_refuses_a_record_limit_one_cell_cannot_fit() -> None:
    """A ``select_groups`` key may take 1.5 KiB: 1 KiB records cannot hold one cell."""
    (problem,) = record_problems(build_aggregates(_limited(SELECTED, 1024)), 1024)
    assert "kafka.max_message_bytes=1024" in problem and "raise kafka.max_message_bytes" in problem
    assert record_problems(build_aggregates(_limited(SELECTED, 4096)), 4096) == []


def test_every_record_of_a_close_fits_the_smallest_limit() -> None:
    """400 x 3 declared cells under a 1 KiB limit: every partial is cut to fit."""
    config = _limited(HISTOGRAM, 1024)
    plans = build_aggregates(config)
    assert record_problems(plans, 1024) == []
    view = View()
    view.apply(*epoch_record(0))
    windows = OpenWindows(plans, view)
    for i in range(1200):
        value = json.dumps({"version": f"v{i % 400}", "os": ["ios", "web", "android"][i % 3]})
        windows.add(0, i, 1_000, value.encode(), i * 100, misplaced=False)
    writes = windows.close(0, 12_000)
    assert sum(json.loads(key)["t"] == "partial" for key, _ in writes) > 10
    assert max(len(key) + len(value or b"") for key, value in writes) <= 1024 - 128


def test_a_record_size_error_is_logged_without_its_size() -> None:
    """aiokafka's text holds the record's size, which grows with the groups it holds."""
    said = _said(MessageSizeTooLargeError("The message is 262309 bytes when serialized"))
    assert "262309" not in said and "MessageSizeTooLargeError" in said
    assert "a released row or an internal record" in said  # red team 14c, finding 3

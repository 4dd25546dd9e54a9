"""Red team (session 12): nested paths meet the aggregates (fixed: ``read.read`` walks the path).

``aggregates`` name their fields by the field's ``name`` and read them with
``record.get(name)`` before the fix: a field named ``device.os``
(the key ``os`` under ``device``, i32-nested) is looked up as the top-level key
``"device.os"``. The config loads and every record is left out of the aggregate: its
rows are pure noise around 0, published with a 95% interval that claims to cover the
count. (A producer can also steer the aggregate by writing a literal top-level
``"device.os"`` key beside the nested one.)

Deterministic (no noise drawn).
"""

from __future__ import annotations

from typing import Any

from privstream.aggregates import build_aggregates
from privstream.config import parse_config

AGG = {"name": "by_os", "query": "count", "group_by": [{"field": "device.os"}], "epsilon": 60}


def test_an_aggregate_over_a_nested_field_counts_the_nested_values() -> None:
    data: dict[str, Any] = {
        "kafka": {"input_topic": "raw", "output_topic": "out", "dead_letter_topic": "dlq"},
        "privacy": {"epsilon": 250.0},
        "fields": [
            {"name": "device.os", "kind": "categorical", "domain": ["ios", "web"], "epsilon": 1},
        ],
        "aggregates": [AGG],
    }
    (plan,) = build_aggregates(parse_config(data))
    accumulator = plan.accumulator("w")
    accumulator.add_all([{"device": {"os": "ios"}}] * 30 + [{"device": {"os": "web"}}] * 10)
    # before the fix: {} -- nothing read; the rows released noise around 0
    assert accumulator.partial().counts == {("ios",): 30, ("web",): 10}

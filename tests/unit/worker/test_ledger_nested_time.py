"""``privacy.ledger.time`` naming a nested timestamp (``event.ts``): the windows come from
the released time read back at its path in the output."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from privstream.config import parse_config
from privstream.errors import LedgerError
from privstream.kinds import build_plan
from privstream.worker.ledger_columns import EventTime

from tests.support.configs import config_dict

FIELDS: list[dict[str, Any]] = [
    {"name": "device_id", "kind": "drop"},
    {"name": "event.ts", "kind": "timestamp", "granularity": "1m"},
    {"name": "x", "kind": "real", "bounds": [0, 10], "epsilon": 1.0},
]


def test_a_nested_time_is_read_back_at_its_path() -> None:
    data = config_dict(FIELDS, epsilon=1.0)
    ledger = {"window": "1h", "epsilon": 2.0, "time": "event.ts"}
    data["privacy"].update({"subject": "device_id", "ledger": ledger})
    read = EventTime.of(build_plan(parse_config(data)), "event.ts")
    outputs = [b'{"event":{"ts":"2026-06-01T10:30:00Z"},"x":1.5}']
    expected = int(datetime(2026, 6, 1, 10, 30, tzinfo=UTC).timestamp() * 1000)
    assert read(outputs).tolist() == [expected]
    with pytest.raises(LedgerError, match=re.escape("'event.ts'")):
        read([b'{"event":"2026-06-01T10:30:00Z","x":1.5}'])

"""The audit of fields named by paths (``device.os``): its records nest them as the
pipeline reads them, memo ids included, and it reads the releases at their paths."""

from __future__ import annotations

import json

from privstream.audit.run import audit
from privstream.audit.sampling import RecordSpec
from privstream.config import parse_config
from privstream.kinds import build_plan

from tests.support.configs import config_dict

FIELDS = [
    {"name": "device.id", "kind": "drop"},
    {
        "name": "device.mode",
        "kind": "boolean",
        "epsilon": 1.0,
        "memoize_by": "device.id",
        "memo_identity_trusted": True,
    },
    {"path": ["net", "latency"], "kind": "real", "bounds": [0, 100], "epsilon": 1.0},
    {
        "name": "net.os",
        "kind": "categorical",
        "domain": ["a", "b"],
        "epsilon": 1.0,
        "on_missing": "impute",
        "impute": "a",
        "presence_epsilon": 0.5,
    },
]


def test_audit_records_are_nested_and_memo_ids_vary_per_draw() -> None:
    spec = RecordSpec({"device.mode": True, "net.latency": 3.0}, ("device.id",))
    first, second = (json.loads(m) for m in spec.messages(0, 2, nonce=5))
    assert first["net"] == {"latency": 3.0} and first["device"]["mode"] is True
    assert first["device"]["id"] != second["device"]["id"]
    flat = RecordSpec({"net.latency": 3.0, "x": 1}, ("id",))
    assert json.loads(flat.messages(0, 1, nonce=5)[0]) == {
        "net": {"latency": 3.0},
        "x": 1,
        "id": "audit-5-0",
    }


def test_a_nested_config_passes_its_audit() -> None:
    """A correct config passes (false failure at most 1 - confidence = 1e-3)."""
    config = parse_config(config_dict(FIELDS, epsilon=3.5))
    report = audit(config, build_plan(config), samples=5000, self_check=False)
    names = [result.name for result in report.fields]
    assert names[:4] == ["device.mode", "net.latency", "net.os", "net.os_present"]
    assert report.passed

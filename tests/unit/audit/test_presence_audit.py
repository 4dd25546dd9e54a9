"""The audit of a presence bit (``presence_epsilon``) contrasts a record holding the field
with one without it: its inputs are about the source field, not a record key of its name."""

from __future__ import annotations

from privstream.audit.scenarios import PlanAuditor
from privstream.config import parse_config
from privstream.kinds import build_plan

from tests.support.configs import config_dict

FIELDS = [
    {
        "name": "latency",
        "kind": "real",
        "bounds": [0, 100],
        "epsilon": 1.0,
        "on_missing": "impute",
        "impute": 50,
        "presence_epsilon": 0.5,
    }
]


def auditor() -> PlanAuditor:
    return PlanAuditor(build_plan(parse_config(config_dict(FIELDS, epsilon=1.5))))


def test_the_bit_is_audited_on_present_against_absent_records() -> None:
    audit = auditor()
    target = audit.by_name["latency_present"]
    specs = audit._specs([target], [{"latency_present": v} for v in target.inputs])
    fixed = {bool(v): dict(spec.fixed) for v, spec in zip(target.inputs, specs, strict=True)}
    assert "latency" in fixed[True] and "latency" not in fixed[False]
    assert all("latency_present" not in f for f in fixed.values())  # no such record key


def test_the_field_itself_is_audited_on_present_values() -> None:
    audit = auditor()
    target = audit.by_name["latency"]
    specs = audit._specs([target], [{"latency": v} for v in target.inputs])
    assert [spec.fixed["latency"] for spec in specs] == list(target.inputs)

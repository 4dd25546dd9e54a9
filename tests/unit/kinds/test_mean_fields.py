"""``real`` with ``mechanism: duchi``, ``pm_sub`` or ``three_outputs``: parse, release, explain,
estimate, audit."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from privstream.audit import audit
from privstream.audit.by_kind import audit_width, target_for
from privstream.cli.main import main
from privstream.cli.metadata import sidecar_path, write_sidecar
from privstream.cli.sanitize import sanitize_stream
from privstream.config import parse_config
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.mechanisms.duchi import DuchiMechanism
from privstream.mechanisms.hybrid import duchi_coin
from privstream.mechanisms.piecewise import calibrate
from privstream.mechanisms.pm_sub import PiecewiseSubMechanism
from privstream.mechanisms.three_outputs import ThreeOutputsMechanism, zero_share
from privstream.mechanisms.three_outputs import calibrate as three_outputs_counts
from privstream.pipeline.plan import PlannedField
from privstream.testing import SeededSource

from tests.support.configs import config_dict


def _field(**extra: Any) -> dict[str, Any]:
    return {
        "name": "latency",
        "kind": "real",
        "mechanism": "duchi",
        "bounds": [0, 500],
        "epsilon": 2.0,
        **extra,
    }


def _planned(**extra: Any) -> PlannedField:
    (planned,) = build_plan(parse_config(config_dict([_field(**extra)], epsilon=5.0))).fields
    return planned


def test_the_release_is_one_of_two_values_around_the_middle() -> None:
    planned = _planned()
    mech = planned.handler.mechanism
    assert isinstance(mech, DuchiMechanism) and planned.mechanism == "duchi"
    b = 250.0 * (math.e**2 + 1) / (math.e**2 - 1)
    assert mech.params()["duchi_bound"] == pytest.approx(b, rel=1e-12)
    parsed = [planned.handler.parse(v) for v in [0, 120.5, 499, 800, -3] * 200]
    column = planned.handler.release(parsed, SeededSource(2))
    assert set(np.round(column.values, 6).tolist()) == {round(250 - b, 6), round(250 + b, 6)}


@pytest.mark.parametrize("mechanism", ["duchi", "pm_sub", "three_outputs"])
def test_refuses_delta_and_calibration(mechanism: str) -> None:
    with pytest.raises(ConfigError, match=f"{mechanism} is pure epsilon-DP"):
        fields = [_field(mechanism=mechanism, delta=1e-6)]
        parse_config(config_dict(fields, epsilon=5.0, delta=1e-5))
    with pytest.raises(ConfigError, match=f"does not apply to {mechanism}"):
        parse_config(config_dict([_field(mechanism=mechanism, calibration="thesis")], epsilon=5.0))


def test_explain_reports_the_bound_and_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config_dict([_field()], epsilon=5.0)), encoding="utf-8")
    assert main(["explain", "--config", str(path), "--format", "json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["fields"]
    assert entry["mechanism"] == "duchi"
    b = (math.e**2 + 1) / (math.e**2 - 1)
    assert entry["expected_error"] == pytest.approx(250.0 * b, rel=1e-9)  # at t = 0
    assert entry["params"]["realised_epsilon"] <= 2.0


ESTIMATE_CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 2}
fields:
  - {name: latency, kind: real, mechanism: MECHANISM, bounds: [0, 500], epsilon: 2}
"""


@pytest.mark.parametrize("mechanism", ["duchi", "pm_sub", "three_outputs"])
def test_estimate_end_to_end_covers_the_truth(
    mechanism: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    text = ESTIMATE_CONFIG.replace("MECHANISM", mechanism)
    config.write_text(text, encoding="utf-8")
    plan = build_plan(parse_config(yaml.safe_load(text)))
    rng = np.random.default_rng(35)
    values = np.where(rng.random(8000) < 0.7, 5.0, 480.0) + rng.random(8000)  # near the bounds
    lines = [json.dumps({"latency": float(v)}).encode() for v in values]
    out = io.BytesIO()
    sanitize_stream(plan, lines, out, str(tmp_path / "dead.jsonl"), SeededSource(5))
    (tmp_path / "clean.jsonl").write_bytes(out.getvalue())
    write_sidecar(sidecar_path(str(tmp_path / "clean.jsonl")), plan, len(lines))
    raw = tmp_path / "raw.jsonl"
    raw.write_bytes(b"\n".join(lines) + b"\n")
    args = ["estimate", "--config", str(config), "--input", str(tmp_path / "clean.jsonl")]
    assert main([*args, "--truth", str(raw), "--format", "json"]) == 0
    (latency,) = json.loads(capsys.readouterr().out)["fields"]
    assert latency["mechanism"] == mechanism and latency["records"] == 8000
    text = json.dumps(latency)
    assert "histogram" not in latency or not latency["histogram"], text
    mean, truth = latency["mean"], float(np.mean(values))
    # 5 standard errors: false failure below 6e-7 for a random seed
    assert abs(mean["estimate"] - truth) < 5 * mean["stderr"], text


@pytest.mark.parametrize(
    ("mechanism", "width"), [("duchi", 2), ("pm_sub", 4), ("three_outputs", 2)]
)
def test_the_audit_passes_and_comes_close(mechanism: str, width: int) -> None:
    config = parse_config(config_dict([_field(mechanism=mechanism)], epsilon=5.0))
    plan = build_plan(config)
    assert target_for(plan.fields[0]).inputs == (0.0, 500.0)
    assert audit_width(plan.fields[0]) == width  # words, and one output
    report = audit(config, plan, samples=10_000, self_check=False)
    (result,) = report.fields
    assert result.passed
    # duchi: {y > mid} has probability ~0.88 vs ~0.12 at the bounds; pm_sub: the windows at
    # the bounds hold ~0.8 of the mass; three_outputs: {y > mid} ~0.80 vs ~0.11: the bound
    # comes near eps
    assert result.epsilon_lower_bound > 0.6 * result.claimed_epsilon


def test_the_audit_fails_a_coin_calibrated_for_twice_the_epsilon() -> None:
    """Thresholds of eps 4 while claiming eps 2: at 10,000 draws per input the audit's
    bound exceeds 2 with overwhelming probability (it fails on a fixed source anyway)."""
    config = parse_config(config_dict([_field()], epsilon=5.0))
    plan = build_plan(config)
    mech = plan.fields[0].handler.mechanism
    assert isinstance(mech, DuchiMechanism)
    mech.coin = duchi_coin(4.0)
    report = audit(config, plan, samples=10_000, self_check=False)
    (result,) = report.fields
    assert not result.passed and result.epsilon_lower_bound > 2.0


def test_the_audit_fails_a_pm_sub_grid_calibrated_for_twice_the_epsilon() -> None:
    config = parse_config(config_dict([_field(mechanism="pm_sub")], epsilon=5.0))
    plan = build_plan(config)
    mech = plan.fields[0].handler.mechanism
    assert isinstance(mech, PiecewiseSubMechanism)
    mech.grid = calibrate(4.0, split=3)
    mech._outputs = mech.grid.outputs()
    report = audit(config, plan, samples=10_000, self_check=False)
    (result,) = report.fields
    assert not result.passed and result.epsilon_lower_bound > 2.0


def test_the_audit_fails_three_outputs_counts_calibrated_for_twice_the_epsilon() -> None:
    config = parse_config(config_dict([_field(mechanism="three_outputs")], epsilon=5.0))
    plan = build_plan(config)
    mech = plan.fields[0].handler.mechanism
    assert isinstance(mech, ThreeOutputsMechanism)
    mech.law = three_outputs_counts(4.0, zero_share(4.0))
    report = audit(config, plan, samples=10_000, self_check=False)
    (result,) = report.fields
    assert not result.passed and result.epsilon_lower_bound > 2.0

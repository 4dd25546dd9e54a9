"""The piecewise / hybrid mean estimator: the report, skips, impossible values, truth."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from privstream.cli.main import main
from privstream.estimate.accumulators import Options
from privstream.estimate.unit_mean import UnitMeanReleases, law_variance
from privstream.mechanisms.hybrid import HybridMechanism
from privstream.mechanisms.piecewise import PiecewiseMechanism
from privstream.testing import SeededSource


def test_report_holds_the_mean_its_intervals_and_the_truth() -> None:
    """20,000 records; the estimate lies within 5 of its stderrs (false failure < 1e-6)."""
    mech = PiecewiseMechanism(bounds=(0.0, 100.0), epsilon=1.0)
    raw = np.linspace(-20.0, 110.0, 20_000)
    released = mech.release(raw, SeededSource(9))
    acc = UnitMeanReleases("x", "real", mech)
    acc.add([*released.tolist()[:10_000], "text", None])
    acc.add(released.tolist()[10_000:])
    truth = acc.new_truth()
    truth.add([], raw.tolist())
    entry = acc.report(Options(), truth)
    mean = entry["mean"]
    assert entry["records"] == 20_000 and entry["skipped"] == {"invalid": 2}
    assert entry["off_grid"] == 0
    clamped = float(np.clip(raw, 0.0, 100.0).mean())
    assert mean["true"] == pytest.approx(clamped) and mean["true_outside_bounds"] > 0
    assert abs(mean["estimate"] - clamped) < 5.0 * mean["stderr"]
    lo, hi = mean["ci"]
    assert hi - lo == pytest.approx(2 * 1.959963984540054 * mean["stderr"])
    # the law plug-in lies below the worst case (values spread inside the bounds)
    assert mean["stderr"] < mean["stderr_worst_case"]
    assert mean["bias_bound"] < 1e-9


def test_a_value_no_release_can_take_is_counted() -> None:
    mech = HybridMechanism(bounds=(0.0, 1.0), epsilon=2.0)
    acc = UnitMeanReleases("x", "real", mech)
    acc.add([0.5, mech.middle + 2.0 * mech.half * mech.reach])
    assert acc.report(Options(), None)["off_grid"] == 1


def test_duchi_alone_bounds_the_noise_by_b_squared_minus_the_mean_squared() -> None:
    mech = HybridMechanism(bounds=(-1.0, 1.0), epsilon=0.3)  # below eps*: Duchi only
    assert mech.pm_probability == 0.0
    b = mech.coin.magnitude
    assert law_variance(mech, 0.5, b * b) == pytest.approx(b * b - 0.25, rel=1e-9)


def test_the_law_plug_in_is_unbiased_for_piecewise() -> None:
    """E[y^2 | t] = (1 + s) t^2 + c makes V_hat exact in expectation: check at t = 0.6."""
    mech = PiecewiseMechanism(bounds=(-1.0, 1.0), epsilon=2.0)
    law = mech.variance_law()
    slope, constant = law.square, law.constant
    second = (1.0 + slope) * 0.36 + constant
    assert law_variance(mech, 0.6, second) == pytest.approx(slope * 0.36 + constant, rel=1e-12)
    assert math.isfinite(law_variance(mech, 0.0, 0.0))  # clipped into the law's range


CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 3}
fields:
  - {name: temp, kind: real, bounds: [-20, 60], epsilon: 1}
  - {name: load, kind: real, bounds: [0, 1], epsilon: 2, mechanism: piecewise}
"""


def test_sanitize_then_estimate_with_the_default_real_mechanism(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whole commands on 5,000 records: the estimate is within 5 stderrs (false failure 6e-7)."""
    rng = np.random.default_rng(4)
    raw = [{"temp": float(v), "load": float(u)} for v, u in zip(
        rng.normal(25.0, 10.0, 5000), rng.random(5000), strict=True
    )]  # fmt: skip
    config, source = tmp_path / "c.yaml", tmp_path / "raw.jsonl"
    config.write_text(CONFIG)
    source.write_text("".join(json.dumps(r) + "\n" for r in raw))
    out = tmp_path / "out.jsonl"
    sanitize = ["sanitize", "--config", str(config), "--input", str(source), "--output", str(out)]
    assert main([*sanitize, "--dead-letter", str(tmp_path / "dead.jsonl")]) == 0
    capsys.readouterr()
    estimate = ["estimate", "--config", str(config), "--input", str(out), "--truth", str(source)]
    assert main([*estimate, "--format", "json"]) == 0
    fields = {f["name"]: f for f in json.loads(capsys.readouterr().out)["fields"]}
    assert fields["temp"]["mechanism"] == "three_outputs"
    assert fields["load"]["mechanism"] == "piecewise"
    for entry in fields.values():
        mean = entry["mean"]
        assert abs(mean["estimate"] - mean["true"]) < 5.0 * mean["stderr"]
        assert entry["off_grid"] == 0 and "histogram" not in entry

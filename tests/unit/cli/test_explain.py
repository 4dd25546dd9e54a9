"""``privstream explain``: JSON shape and values match the DESIGN.md formulas."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from privstream.cli.main import main

from tests.support.configs import (
    laplace_gamma,
    laplace_thesis_scale,
    laplace_tight_scale,
    rr_gamma,
)

CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 3, delta: 1.0e-5}
fields:
  - {name: device_id, kind: drop}
  - {name: ts, kind: public}
  - {name: salary, kind: real, mechanism: laplace, bounds: [1504, 4500], epsilon: 1, delta: 1.0e-6}
  - {name: temp, kind: real, mechanism: laplace, bounds: [-20, 60], epsilon: 0.5, delta: 1.0e-6,
     calibration: thesis}
  - {name: state, kind: categorical, domain: [TX, CA, NY], epsilon: 1}
  - {name: crashed, kind: boolean, epsilon: 0.5, delta: 1.0e-6}
"""
NAMES = ["device_id", "ts", "salary", "temp", "state", "crashed"]


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


def explain_json(config_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["explain", "--config", str(config_path), "--format", "json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_json_shape(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = explain_json(config_path, capsys)
    assert {"record", "fields"} <= set(data)
    assert {"epsilon", "delta"} <= set(data["record"])
    assert [f["name"] for f in data["fields"]] == NAMES
    required = {
        "name",
        "kind",
        "mechanism",
        "epsilon",
        "delta",
        "params",
        "expected_error",
        "gamma_lower_bound",
    }
    for field in data["fields"]:
        assert required <= set(field), field["name"]


def test_record_budget(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = explain_json(config_path, capsys)["record"]
    assert record["epsilon"] == pytest.approx(1 + 0.5 + 1 + 0.5, rel=1e-12)
    assert record["delta"] == pytest.approx(3e-6, rel=1e-12)
    assert record["budget_epsilon"] == 3.0
    assert record["budget_delta"] == 1e-5


def test_non_noised_fields(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fields = {f["name"]: f for f in explain_json(config_path, capsys)["fields"]}
    for name, kind in (("device_id", "drop"), ("ts", "public")):
        f = fields[name]
        assert f["kind"] == kind
        assert f["mechanism"] is None
        assert f["epsilon"] == 0.0
        assert f["delta"] == 0.0
        assert f["params"] == {}
        assert f["expected_error"] is None
        assert f["gamma_lower_bound"] is None


@pytest.mark.parametrize(
    ("name", "diam", "eps", "delta", "calibration"),
    [("salary", 2996.0, 1.0, 1e-6, "tight"), ("temp", 80.0, 0.5, 1e-6, "thesis")],
)
def test_laplace_fields(
    config_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    diam: float,
    eps: float,
    delta: float,
    calibration: str,
) -> None:
    f = {f["name"]: f for f in explain_json(config_path, capsys)["fields"]}[name]
    scale = (laplace_tight_scale if calibration == "tight" else laplace_thesis_scale)(
        diam, eps, delta
    )
    assert f["kind"] == "real"
    assert f["mechanism"] == "laplace"
    assert f["epsilon"] == eps
    assert f["delta"] == delta
    assert f["params"]["scale"] == pytest.approx(scale, rel=1e-2)
    assert f["params"]["calibration"] == calibration
    assert f["params"]["upper"] - f["params"]["lower"] == diam
    assert f["expected_error"] == pytest.approx(scale, rel=1e-2)
    assert f["gamma_lower_bound"] == pytest.approx(laplace_gamma(diam, eps, delta), rel=1e-12)


@pytest.mark.parametrize(
    ("name", "size", "eps", "delta"), [("state", 3, 1.0, 0.0), ("crashed", 2, 0.5, 1e-6)]
)
def test_randomized_response_fields(
    config_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    size: int,
    eps: float,
    delta: float,
) -> None:
    f = {f["name"]: f for f in explain_json(config_path, capsys)["fields"]}[name]
    m = size - 1
    p = (1.0 - delta) / (m + math.exp(eps))
    assert f["mechanism"] == "randomized_response"
    assert f["epsilon"] == eps
    assert f["delta"] == delta
    assert f["params"]["p"] == pytest.approx(p, rel=1e-12)
    assert f["params"]["keep_probability"] == pytest.approx(1.0 - m * p, rel=1e-12)
    assert f["params"]["domain_size"] == size
    assert f["expected_error"] == pytest.approx(m * p, rel=1e-12)
    assert f["gamma_lower_bound"] == pytest.approx(rr_gamma(m, eps, delta), rel=1e-12)


def test_table_mentions_every_field(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--config", str(config_path), "--format", "table"]) == 0
    out = capsys.readouterr().out
    rows = out.splitlines()
    for name in NAMES:
        assert any(row.split()[:1] == [name] for row in rows), name
    assert "laplace" in out
    assert "randomized_response" in out
    assert "removed" in out  # the drop field
    assert "copied as is" in out  # the public field
    assert "epsilon=3" in out


def test_table_is_the_default(config_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--config", str(config_path)]) == 0
    default = capsys.readouterr().out
    assert main(["explain", "--config", str(config_path), "--format", "table"]) == 0
    assert capsys.readouterr().out == default


def test_explain_with_bad_config_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(CONFIG.replace("privacy: {epsilon: 3", "privacy: {epsilon: 2"), "utf-8")
    with pytest.raises(SystemExit) as info:
        main(["explain", "--config", str(path), "--format", "json"])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("privstream: config error: privacy.epsilon: ")


MEMO_CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 2}
fields:
  - {name: device, kind: drop}
  - {name: country, kind: categorical, domain: [DE, FR], epsilon: 1, memo_identity: message_key}
  - {name: crashed, kind: boolean, epsilon: 1}
"""


def test_explain_names_memoized_fields_and_what_they_leave_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "memo.yaml"
    path.write_text(MEMO_CONFIG)
    assert main(["explain", "--config", str(path), "--format", "json"]) == 0
    fields = {f["name"]: f for f in json.loads(capsys.readouterr().out)["fields"]}
    assert fields["country"]["memo_identity"] == "message_key"
    assert fields["crashed"]["memo_identity"] is None
    assert main(["explain", "--config", str(path), "--wide"]) == 0
    assert "ever): country; whether a device's value changed is not protected" in (
        capsys.readouterr().out
    )


LONG_CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 3, delta: 1.0e-5, group_size: 2}
fields:
  - {name: device_id, kind: drop}
  - {name: battery_temperature_celsius, kind: real, bounds: [-20, 60], epsilon: 0.5,
     delta: 1.0e-6}
  - {name: state, kind: categorical, domain: [TX, CA, NY], epsilon: 1, memoize_by: device_id,
     memo_identity_trusted: true}
"""


@pytest.mark.parametrize("text", [CONFIG, LONG_CONFIG], ids=["plain", "memo"])
def test_table_fits_100_columns_and_wide_keeps_one_line_per_field(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["explain", "--config", str(path)]) == 0
    narrow = capsys.readouterr().out.splitlines()
    assert main(["explain", "--config", str(path), "--wide"]) == 0
    wide = capsys.readouterr().out.splitlines()
    assert max(map(len, wide)) > 100  # the case the wrapping is for
    assert max(map(len, narrow)) <= 100
    assert main(["explain", "--config", str(path), "--format", "json"]) == 0
    fields = json.loads(capsys.readouterr().out)["fields"]
    table = narrow[2 : narrow.index("")]
    starts = [i for i, line in enumerate(table) if not line.startswith(" ")]
    assert len(starts) == len(fields)
    for f, at, end in zip(fields, starts, [*starts[1:], len(table)], strict=True):
        # --wide: the row holds every parameter; narrow: the indented lines under the row
        row = next(line for line in wide if line.startswith(f["name"] + " "))
        assert all(f"{k}=" in row for k in f["params"])
        name = table[at].split()[0]
        assert name == f["name"] or (name.endswith("\u2026") and f["name"].startswith(name[:-1]))
        below = " ".join(table[at + 1 : end]).split()
        assert below == (row.split()[5:-2] if f["params"] else [])
    # the notes below the table keep every word, only the line breaks differ
    notes_wide = " ".join(wide[wide.index("") + 1 :]).split()
    notes_narrow = " ".join(narrow[narrow.index("") + 1 :]).split()
    assert notes_narrow == notes_wide


WORDS = ", ".join(f"v{i}" for i in range(1000))
OPTIMALITY_CONFIG = f"""\
kafka: {{input_topic: raw, output_topic: clean, dead_letter_topic: dlq}}
privacy: {{epsilon: 5}}
fields:
  - {{name: rr, kind: categorical, domain: [{WORDS}], epsilon: 1, mechanism: randomized_response}}
  - {{name: x, kind: real, bounds: [0, 100], epsilon: 1}}
"""


def test_explain_shows_the_per_record_and_the_aggregate_view_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's example: RR at k = 1,000 is optimal per record and far off in aggregate."""
    path = tmp_path / "c.yaml"
    path.write_text(OPTIMALITY_CONFIG, encoding="utf-8")
    rr, x = explain_json(path, capsys)["fields"]
    assert rr["optimality"]["error_to_gamma"] == pytest.approx(1.0, rel=1e-9)
    # RR / OLH summed variances, from the formulas: A + (k - 1) B at n = 1000 for each
    k, e = 1000, math.e
    p = 1 / (k - 1 + e)
    rr_var = (e * p * (1 - e * p) + (k - 1) * p * (1 - p)) / (1000 * (e * p - p) ** 2)
    g = 4
    keep = e / (e + g - 1)
    olh_var = (keep * (1 - keep) + (k - 1) / g * (1 - 1 / g)) / (1000 * (keep - 1 / g) ** 2)
    assert rr["optimality"]["variance_to_auto"] == pytest.approx(rr_var / olh_var, rel=1e-9)
    assert rr["optimality"]["auto_choice"] == "local_hashing"
    # a real field without a mechanism is auto's own choice: 1 in the aggregate view
    assert x["optimality"]["error_to_gamma"] == pytest.approx(
        x["expected_error"] / x["gamma_lower_bound"]
    )
    assert x["optimality"]["variance_to_auto"] == 1.0
    assert x["optimality"]["variance_kind"] == "worst-case variance of the mean"
    assert main(["explain", "--config", str(path), "--wide"]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown = "optimality: rr: E[error]/gamma LB 1; frequency-vector variance at n=1000 vs auto"
    assert any(line.startswith(f"{shown} (local_hashing) ") for line in lines)
    assert any(line.startswith("optimality: x: E[error]/gamma LB ") for line in lines)
    assert any(line.startswith("optimality: E[error]/gamma LB is the per-record") for line in lines)
    assert sum("WARNING: rr: randomized_response has" in line for line in lines) == 1


def test_sanitize_warns_once_per_losing_field_at_start_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(OPTIMALITY_CONFIG, encoding="utf-8")
    data = tmp_path / "in.jsonl"
    data.write_text('{"rr": "v1", "x": 3}\n', encoding="utf-8")
    out = tmp_path / "out.jsonl"
    args = ["sanitize", "--config", str(path), "--input", str(data), "--output", str(out)]
    assert main(args) == 0
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if line.startswith("privstream: WARNING: ")]
    assert len(warnings) == 1 and warnings[0].startswith(
        "privstream: WARNING: rr: randomized_response has "
    )

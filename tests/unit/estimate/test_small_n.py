"""Small-n warnings: shares outside [0, 1] and intervals wider than the domain are said plainly.

The n = 3 case of issue 35 (shares of 6.32 and -1.54, no warning) through the
real entry point; the released values are written by hand (valid releases of
the config, with its release metadata) so every number is exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from privstream.cli.main import main
from privstream.cli.metadata import sidecar_path, write_sidecar
from privstream.config import parse_config
from privstream.estimate.small_n import range_warnings
from privstream.kinds import build_plan

CONFIG = {
    "privacy": {"epsilon": 1.0},
    "fields": [
        {"name": "state", "kind": "categorical", "domain": ["TX", "CA", "NY"],
         "mechanism": "randomized_response", "epsilon": 0.5},
        {"name": "temp", "kind": "real", "mechanism": "laplace", "bounds": [0, 100],
         "epsilon": 0.5},
    ],
}  # fmt: skip


def _estimate(tmp_path: Path, states: list[str], temps: list[float]) -> int:
    config = tmp_path / "c.json"
    config.write_text(json.dumps(CONFIG))
    out = tmp_path / "out.jsonl"
    rows = [{"state": s, "temp": t} for s, t in zip(states, temps, strict=True)]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_sidecar(sidecar_path(str(out)), build_plan(parse_config(CONFIG)), len(rows))
    return main(["estimate", "--config", str(config), "--input", str(out)])


def test_three_records_warn_of_shares_outside_the_unit_interval_and_useless_intervals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _estimate(tmp_path, ["TX", "TX", "CA"], [0.0, 50.0, 100.0])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    warnings = [line for line in captured.err.splitlines() if "warning" in line]
    # eps 0.5, k = 3: p = e^0.5 / (e^0.5 + 2), q = 1 / (e^0.5 + 2): TX 2.20, CA 0.33, NY -1.54
    assert any("field state: 2 of 3 shares lie outside [0, 1] at n = 3" in w for w in warnings)
    assert any("field state: 3 of 3 intervals are wider than [0, 1]" in w for w in warnings)
    assert any("field temp: the mean's interval" in w and "[0, 100]" in w for w in warnings)
    assert "  warning: 2 of 3 shares lie outside [0, 1]" in captured.out  # in the table too


def test_in_range_estimates_give_no_warning() -> None:
    entry = {
        "records": 10_000,
        "frequencies": [
            {"value": "a", "estimate": 0.7, "stderr": 0.01, "ci": [0.68, 0.72]},
            {"value": "b", "estimate": 0.3, "stderr": 0.01, "ci": [0.28, 0.32]},
        ],
        "bounds": [0.0, 1.0],
        "mean": {"estimate": 0.5, "stderr": 0.1, "ci": [0.3, 0.7]},
    }
    assert range_warnings(entry) == []
    entry["frequencies"][1]["estimate"] = -0.01  # a rare value, slightly negative: said too
    entry["mean"]["ci"] = [-0.2, 1.2]
    found = range_warnings(entry)
    assert len(found) == 2 and "1 of 2 shares" in found[0] and "wider than the bounds" in found[1]

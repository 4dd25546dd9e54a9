"""``estimate --by FIELD``: estimates per value of a released field.

Sanitized with a seeded source, so every number is deterministic; the
statistical assertion is loose (5 standard errors: false failure below 6e-7
per assertion for random seeds).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from privstream.cli.main import main
from privstream.cli.metadata import sidecar_path, write_sidecar
from privstream.cli.sanitize import sanitize_stream
from privstream.config import parse_config
from privstream.estimate.accumulators import MISSING
from privstream.estimate.groups import MAX_GROUPS, group_key
from privstream.kinds import build_plan
from privstream.testing import SeededSource

CONFIG = {
    "privacy": {"epsilon": 6},
    "fields": [
        {"name": "event", "kind": "public"},
        {"name": "state", "kind": "categorical", "domain": ["TX", "CA"],
         "mechanism": "randomized_response", "epsilon": 2},
        {"name": "temp", "kind": "real", "mechanism": "laplace", "bounds": [0, 100],
         "epsilon": 4},
    ],
}  # fmt: skip
N = 6_000


@pytest.fixture
def sanitized(tmp_path: Path) -> dict[str, Any]:
    rng = np.random.default_rng(8)
    events = rng.choice(["click", "view"], N, p=[0.3, 0.7])
    temps = np.where(events == "click", rng.uniform(10, 30, N), rng.uniform(40, 60, N))
    raw = [
        json.dumps({"event": str(e), "state": str(rng.choice(["TX", "CA"])), "temp": float(t)})
        for e, t in zip(events, temps, strict=True)
    ]
    plan = build_plan(parse_config(CONFIG))
    out = io.BytesIO()
    sanitize_stream(
        plan, [r.encode() for r in raw], out, str(tmp_path / "d.jsonl"), SeededSource(9)
    )
    config, path = tmp_path / "c.json", tmp_path / "s.jsonl"
    config.write_text(json.dumps(CONFIG))
    path.write_bytes(out.getvalue())
    write_sidecar(sidecar_path(str(path)), plan, N)
    means = {e: float(temps[events == e].mean()) for e in ("click", "view")}
    counts = {e: int((events == e).sum()) for e in ("click", "view")}
    return {"config": config, "path": path, "means": means, "counts": counts}


def _estimate(capsys: pytest.CaptureFixture[str], made: dict[str, Any], *args: str) -> Any:
    base = ["estimate", "--config", str(made["config"]), "--input", str(made["path"])]
    code = main([*base, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_estimates_per_value_of_a_public_field(
    sanitized: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _estimate(capsys, sanitized, "--by", "event", "--format", "json")
    assert code == 0 and "noised" not in err, err
    by = json.loads(out)["by"]
    assert by["field"] == "event" and by["noised"] is None and by["ungrouped"] == {}
    groups = {json.loads(g["value"]): g for g in by["groups"]}
    assert {e: g["records"] for e, g in groups.items()} == sanitized["counts"]
    for event, group in groups.items():
        (temp,) = [f for f in group["fields"] if f["name"] == "temp"]
        mean = temp["mean"]
        assert abs(mean["estimate"] - sanitized["means"][event]) < 5 * mean["stderr"]
    code, out, _ = _estimate(capsys, sanitized, "--by", "event")
    assert code == 0 and "by event: 2 groups" in out and '== event = "click"  (1,' in out


def test_splitting_by_a_noised_field_warns(
    sanitized: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _estimate(capsys, sanitized, "--by", "state", "--field", "temp")
    assert code == 0
    assert "--by state: state is noised (randomized_response)" in err
    assert "warning: --by state: state is noised" in out
    code, _, err = _estimate(capsys, sanitized, "--by", "nope")
    assert code == 2 and "--by nope: no released field of that name" in err


def test_group_keys() -> None:
    assert group_key("click") == '"click"' and group_key(3) == "3" and group_key(None) == "null"
    assert group_key(MISSING) == "(absent)" and group_key([1]) is None and MAX_GROUPS == 100

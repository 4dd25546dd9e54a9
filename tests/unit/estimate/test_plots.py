"""``--plot DIR``: a plot for every estimated field, or the reason there is none."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from privstream.cli.main import main
from privstream.cli.metadata import sidecar_path, write_sidecar
from privstream.cli.sanitize import sanitize_stream
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.testing import SeededSource

CONFIG = {
    "privacy": {"epsilon": 4},
    "fields": [
        {"name": "latency", "kind": "real", "mechanism": "hybrid", "bounds": [0, 1000],
         "epsilon": 0.5},
        {"name": "temp", "kind": "real", "mechanism": "laplace", "bounds": [0, 100],
         "epsilon": 0.5},
        {"name": "url", "kind": "categorical", "mechanism": "local_hashing", "epsilon": 1},
        {"name": "ok", "kind": "boolean", "epsilon": 1},
    ],
}  # fmt: skip
N = 300


def test_every_estimated_field_gets_a_plot_or_a_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(3)
    raw = [
        json.dumps({"latency": float(rng.uniform(0, 900)), "temp": float(rng.uniform(0, 99)),
                    "url": "a.com", "ok": bool(rng.random() < 0.5)}).encode()
        for _ in range(N)
    ]  # fmt: skip
    plan = build_plan(parse_config(CONFIG))
    out = io.BytesIO()
    sanitize_stream(plan, raw, out, str(tmp_path / "dead.jsonl"), SeededSource(4))
    config, sanitized = tmp_path / "c.json", tmp_path / "s.jsonl"
    config.write_text(json.dumps(CONFIG))
    sanitized.write_bytes(out.getvalue())
    write_sidecar(sidecar_path(str(sanitized)), plan, N)
    target = tmp_path / "plots"
    args = ["estimate", "--config", str(config), "--input", str(sanitized), "--plot", str(target)]
    assert main(args) == 0
    captured = capsys.readouterr()
    # hybrid: the mean and its intervals (no histogram); temp at n = 300, eps 0.5: every bin
    # withheld, the plot shows the released values' histogram and the mean, not the bins
    assert sorted(p.name for p in target.iterdir()) == ["latency.png", "ok.png", "temp.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in target.iterdir())
    assert "3 plot(s) written" in captured.err
    assert "no plot for field url: nothing estimated (a local-hashing field without" in captured.err
    assert "histogram: none can be had: hybrid releases are built for the mean" in captured.out
    assert "10 of 10 bins withheld" in captured.out

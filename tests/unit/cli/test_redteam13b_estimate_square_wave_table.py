"""Red team 13b: ``estimate``'s default (table) output of a square_wave field.

The JSON report works, but the table renderer reads ``hist["integer_bins"]``,
which ``distribution.SquareWaveReleases`` does not write: ``privstream
estimate --config C --input F`` on any ``target: distribution`` field ends in
a KeyError traceback; so does ``--plot DIR`` (``plots``, the same key).
Deterministic (seeded sanitize).
"""

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
    "privacy": {"epsilon": 2},
    "fields": [
        {"name": "x", "kind": "real", "target": "distribution", "bounds": [0, 100], "epsilon": 2}
    ],
}
N = 2000


def _sanitized(tmp_path: Path) -> list[str]:
    values = np.random.default_rng(4).uniform(0, 100, N)
    plan = build_plan(parse_config(CONFIG))
    out = io.BytesIO()
    raw = [json.dumps({"x": float(v)}).encode() for v in values]
    sanitize_stream(plan, raw, out, str(tmp_path / "dead.jsonl"), SeededSource(2))
    config, sanitized = tmp_path / "c.json", tmp_path / "s.jsonl"
    config.write_text(json.dumps(CONFIG))
    sanitized.write_bytes(out.getvalue())
    write_sidecar(sidecar_path(str(sanitized)), plan, N)
    return ["estimate", "--config", str(config), "--input", str(sanitized), "--bins", "5"]


def test_the_table_report_of_a_square_wave_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_sanitized(tmp_path)) == 0  # today: KeyError (report._histogram_lines)
    assert "square_wave" in capsys.readouterr().out


def test_the_plot_of_a_square_wave_field(tmp_path: Path) -> None:
    plots = tmp_path / "plots"
    args = [*_sanitized(tmp_path), "--format", "json", "--plot", str(plots)]
    assert main(args) == 0  # today: KeyError: 'integer_bins' (plots)
    assert list(plots.glob("*.png"))

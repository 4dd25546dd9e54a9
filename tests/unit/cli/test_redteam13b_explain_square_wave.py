"""Red team 13b: ``explain`` on a Square Wave field whose bounds no mean mechanism can run.

``target: distribution`` (square_wave) accepts bounds [0, 1e300] at epsilon
1e-9 (its reports stay within the bounds' reach), but laplace, piecewise and
auto refuse them. ``explain``'s auto comparison then has no candidate,
falls back to "laplace" with no regrets (``auto_real._assess``, marked
"pragma: no cover - Laplace runs at every epsilon the config accepts") and
``explain_auto_real`` raises KeyError: 'laplace', a traceback instead of a
report. ``sanitize`` and ``run`` accept the config.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from privstream.cli.main import main

CONFIG = {
    "privacy": {"epsilon": 1},
    "fields": [
        {"name": "y", "kind": "real", "target": "distribution", "bounds": [0, 1e300],
         "epsilon": 1e-9},
    ],
}  # fmt: skip


def test_explain_reports_a_square_wave_field_no_mean_mechanism_can_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.json"
    config.write_text(json.dumps(CONFIG))
    assert main(["explain", "--config", str(config)]) == 0  # today: KeyError: 'laplace'
    assert "square_wave" in capsys.readouterr().out

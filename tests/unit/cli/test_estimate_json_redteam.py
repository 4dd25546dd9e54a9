"""Red team: ``estimate --format json`` on a config the loader accepts ends in a traceback.

Bounds near the double range (``[0, 1e300]``, accepted) give an infinite
``stderr_worst_case`` (``sqrt`` of a variance beyond the double range), and the
report is printed with ``json.dumps(allow_nan=False)``: ``ValueError: Out of range
float values are not JSON compliant`` instead of a report (the table form works).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from privstream.cli.main import main

CONFIG = """\
kafka: {{input_topic: raw, output_topic: clean, dead_letter_topic: dlq}}
privacy: {{epsilon: 5, delta: 1e-6}}
fields:
  - {{name: x, kind: real, bounds: [0, 1e300], epsilon: 5, mechanism: {mechanism}}}
"""


@pytest.mark.parametrize("mechanism", ["piecewise", "hybrid"])
def test_estimate_json_of_huge_bounds_is_a_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mechanism: str
) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG.format(mechanism=mechanism))
    (tmp_path / "in.jsonl").write_text('{"x": 1}\n{"x": 1e300}\n{"x": 5}\n')
    config, out = str(tmp_path / "c.yaml"), str(tmp_path / "out.jsonl")
    assert main(["sanitize", "--config", config, "--input", str(tmp_path / "in.jsonl"),
                 "--output", out, "--dead-letter", str(tmp_path / "dl.jsonl")]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["estimate", "--config", config, "--input", out, "--format", "json"]) == 0
    json.loads(capsys.readouterr().out)

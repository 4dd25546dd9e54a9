"""``privstream sanitize`` (file mode) releases long integers and lone surrogates (issue 29).

Lines holding a 4,301- or 10,000-digit integer in a noised field, or a lone
surrogate under local hashing, were dead-lettered (and the run exited 1 for
the dead-letter share); each must be sanitized like an ordinary
out-of-range or unknown value, through the real entry point.
"""

from __future__ import annotations

import json
from pathlib import Path

from privstream.cli.main import main

CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 3}
fields:
  - {name: n, kind: integer, bounds: [0, 100], epsilon: 1}
  - {name: r, kind: real, bounds: [-5, 5], mechanism: laplace, epsilon: 1}
  - {name: c, kind: categorical, mechanism: local_hashing, epsilon: 1}
"""


def test_long_integers_and_lone_surrogates_are_sanitized(tmp_path: Path) -> None:
    config, raw, out = tmp_path / "c.yaml", tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    config.write_text(CONFIG, encoding="utf-8")
    lines = [
        '{"n": 5, "r": 1.5, "c": "a"}',
        '{"n": ' + "9" * 4301 + ', "r": -' + "9" * 10_000 + ', "c": "\\ud800"}',
        '{"n": -' + "1" + "0" * 9_999 + ', "r": 1e99999999, "c": "x\\udfffy"}',
    ]
    raw.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["sanitize", "--config", str(config), "--input", str(raw), "--output", str(out)]
    args += ["--dead-letter", str(tmp_path / "dl.jsonl")]
    assert main(args) == 0
    released = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(released) == 3
    assert not (tmp_path / "dl.jsonl").exists()
    for record in released:
        assert set(record) == {"n", "r", "c"} and set(record["c"]) == {"seed", "bucket"}

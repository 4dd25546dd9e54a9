"""A mean whose bounds reach near the config's limit (2**1002) is released, not a crash.

Its standard error was a sum of squares of numbers near the bounds, which overflows a
double (``OverflowError`` out of ``sanitize``, nothing written); it is now ``math.hypot``
of the two terms (``queries._mean``). Found by the helper fixing red team 14c.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from privstream.cli.main import main


@pytest.mark.parametrize("reach", [1e300, 2.0**1002])
def test_a_mean_at_extreme_bounds_is_released(tmp_path: Path, reach: float) -> None:
    config = {
        "privacy": {"epsilon": 10.0},
        "fields": [{"name": "x", "kind": "public"}],
        "aggregates": [
            {"name": "m", "query": "mean", "field": "x", "bounds": [-reach, reach], "epsilon": 1}
        ],
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "in.jsonl").write_text("".join(f'{{"x": {i}}}\n' for i in range(10)))
    rows = tmp_path / "agg.jsonl"
    code = main(
        [
            *("sanitize", "--config", str(tmp_path / "config.json")),
            *("--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl")),
            *("--dead-letter", str(tmp_path / "dead.jsonl"), "--aggregates-output", str(rows)),
        ]
    )
    assert code == 0
    (row,) = [json.loads(line) for line in rows.read_text().splitlines()]
    assert -reach <= row["value"] <= reach
    assert math.isfinite(row["std_error"]) and row["std_error"] > 0

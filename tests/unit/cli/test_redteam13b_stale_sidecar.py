"""Red team 13b: a sidecar vouches for records appended after it was written.

``sanitize`` writes ``records`` into the sidecar, but ``estimate`` never
compares it with what it reads, and the sidecar is bound to nothing else of
the file. Records sanitized at epsilon 0.05 appended to a file sanitized at
epsilon 2 are all debiased as epsilon 2: the report's stderr describes
epsilon-2 noise only (half the records carry 40 times its scale), and nothing
on stderr says the file holds twice the records its metadata names.
Deterministic (seeded sanitize).
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
from privstream.kinds import build_plan
from privstream.testing import SeededSource

N = 3000


def _config(epsilon: float) -> dict[str, Any]:
    field = {"name": "x", "kind": "real", "mechanism": "laplace", "bounds": [0, 100]}
    return {"privacy": {"epsilon": epsilon}, "fields": [{**field, "epsilon": epsilon}]}


def _sanitized(config: dict[str, Any], raw: list[bytes], seed: int, dead: Path) -> bytes:
    out = io.BytesIO()
    sanitize_stream(build_plan(parse_config(config)), raw, out, str(dead), SeededSource(seed))
    return out.getvalue()


def test_records_beyond_those_the_metadata_names_are_refused_or_warned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = np.random.default_rng(6).uniform(0, 100, N)
    raw = [json.dumps({"x": float(v)}).encode() for v in values]
    dead = tmp_path / "dead.jsonl"
    first, second = _config(2.0), _config(0.05)
    path = tmp_path / "s.jsonl"
    path.write_bytes(_sanitized(first, raw, 1, dead))
    write_sidecar(sidecar_path(str(path)), build_plan(parse_config(first)), N)
    with path.open("ab") as handle:  # a later run of another config, appended
        handle.write(_sanitized(second, raw, 2, dead))
    config = tmp_path / "c.json"
    config.write_text(json.dumps(first))
    code = main(["estimate", "--config", str(config), "--input", str(path), "--format", "json"])
    captured = capsys.readouterr()
    if code == 2:
        return  # refused
    assert f"{N:,}" in captured.err or str(N) in captured.err, (
        json.loads(captured.out)["fields"][0]["records"],
        captured.err,
    )

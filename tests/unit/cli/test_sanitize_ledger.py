"""File mode refuses a per-subject ledger it could not enforce (docs/ledger.md, File mode)."""

from __future__ import annotations

from pathlib import Path

import pytest
from privstream.cli.main import main

from tests.unit.cli.test_explain_ledger import CONFIG


def test_sanitize_refuses_a_ledger_before_writing_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    source = tmp_path / "in.jsonl"
    source.write_text('{"device_id": "d", "temp": 20, "crashed": false}\n', encoding="utf-8")
    out, dead = tmp_path / "out.jsonl", tmp_path / "dead.jsonl"
    code = main(
        [
            "sanitize",
            "--config",
            str(config),
            "--input",
            str(source),
            "--output",
            str(out),
            "--dead-letter",
            str(dead),
        ]
    )
    assert code == 2
    assert "privacy.ledger: sanitize cannot enforce a per-subject ledger on a file" in (
        capsys.readouterr().err
    )
    assert not out.exists() and not dead.exists()

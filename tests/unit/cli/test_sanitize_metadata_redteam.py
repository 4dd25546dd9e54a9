"""Red team (after issue 29): ``--metadata`` is a fourth file ``sanitize`` writes, and
it was checked against the others by resolved path only, and never for existence.

* ``--metadata raw.jsonl < raw.jsonl``: the input is stdin, so the path check has no
  input path to compare with; ``run_sanitize`` unlinks the metadata path and writes the
  sidecar there: the raw records are gone and the run exits 0 (data loss, the very
  attack ``--output`` is guarded against by the descriptor's inode).
* ``--metadata`` an existing file, without ``--overwrite``: replaced silently, though
  ``--output`` and ``--dead-letter`` refuse an existing path.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from privstream.cli.main import main

from tests.unit.cli.test_sanitize_files import files  # noqa: F401  (fixture)


def test_metadata_onto_the_input_read_from_stdin_is_refused(
    files: dict[str, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = files["input"].read_bytes()
    with files["input"].open() as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        code = main(
            ["sanitize", "--config", str(files["config"]), "--output", str(files["output"]),
             "--dead-letter", str(files["dead"]), "--metadata", str(files["input"])]
        )  # fmt: skip
    assert code == 2, capsys.readouterr().err
    assert files["input"].read_bytes() == before
    assert not files["output"].exists()


def test_an_existing_metadata_file_is_refused_without_overwrite(
    files: dict[str, Path],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    earlier = files["input"].with_name("earlier-meta.json")
    earlier.write_text("{}\n")
    code = main(
        ["sanitize", "--config", str(files["config"]), "--input", str(files["input"]),
         "--output", str(files["output"]), "--dead-letter", str(files["dead"]),
         "--metadata", str(earlier)]
    )  # fmt: skip
    assert code == 2, capsys.readouterr().err
    assert earlier.read_text() == "{}\n"

"""File mode needs no ``kafka:`` section (the broker commands name it when it is missing);
explain into a closed pipe; a count of one in the singular."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from privstream.cli.main import main
from privstream.cli.sanitize import Summary
from privstream.config import parse_config
from privstream.errors import ConfigError

FILE_ONLY = """\
privacy: {epsilon: 1.0}
fields:
  - {name: id, kind: drop}
  - {name: ok, kind: boolean, epsilon: 1.0}
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "file-only.yaml"
    path.write_text(FILE_ONLY, encoding="utf-8")
    return path


def test_a_config_without_kafka_loads_and_names_it_when_needed() -> None:
    loaded = parse_config(
        {"privacy": {"epsilon": 1.0}, "fields": [{"name": "x", "kind": "public"}]}
    )
    assert loaded.kafka is None
    with pytest.raises(ConfigError) as caught:
        loaded.needs_kafka("run")
    [problem] = caught.value.problems
    assert problem.startswith("kafka: required by `privstream run`")
    assert "input_topic, output_topic and dead_letter_topic" in problem


def test_sanitize_and_explain_run_without_kafka(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text('{"id": "a", "ok": true}\n{"id": "b", "ok": false}\n', encoding="utf-8")
    args = ["--config", str(config), "--input", str(source), "--output", str(output)]
    assert main(["sanitize", *args]) == 0
    released = [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]
    assert [list(record) for record in released] == [["ok"], ["ok"]]
    assert main(["explain", "--config", str(config)]) == 0
    assert "kafka" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [["run"], ["topics", "check"], ["topics", "create"], ["estimate", "--topic"]],
)
def test_broker_commands_exit_2_naming_the_section(
    config: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        exit_code = main([*argv, "--config", str(config)])
        raise SystemExit(exit_code)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"config error: kafka: required by `privstream {' '.join(argv)}`" in err


def test_explain_into_a_closed_pipe_says_nothing(config: Path) -> None:
    """`privstream explain | head`: the reader left; no "Broken pipe", no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte is written
    try:
        done = subprocess.run(
            [sys.executable, "-m", "privstream", "explain", "--config", str(config)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            check=False,
        )
    finally:
        os.close(write_end)
    assert done.stderr == b"", done.stderr.decode()
    assert done.returncode == 1


def test_one_record_is_one_record() -> None:
    summary = Summary(records_in=1, records_out=1, blank_lines=1)
    assert summary.render("dead.jsonl") == (
        "privstream sanitize: 1 record in, 1 sanitized, 0 dead-lettered; 1 blank line skipped"
    )

"""``privstream topics`` without a broker: one line and exit 1, usage errors exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from privstream.cli.main import main

CONFIG = """\
kafka: {bootstrap_servers: "127.0.0.1:1", input_topic: a, output_topic: b, dead_letter_topic: c}
privacy: {epsilon: 1}
fields: [{name: x, kind: boolean, epsilon: 1}]
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


@pytest.mark.parametrize("action", [["check"], ["create", "--partitions", "2"]])
def test_no_broker_is_one_line_and_exit_1(
    config: Path, action: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["topics", *action, "--config", str(config)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err  # aiokafka's own lines are not printed
    assert err[0].startswith("privstream: topics: the broker at 127.0.0.1:1 did not answer")


@pytest.mark.parametrize("count", ["0", "-1", "two"])
def test_a_partition_count_is_a_whole_number_of_at_least_one(
    config: Path, count: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["topics", "create", "--config", str(config), "--partitions", count])
    assert exited.value.code == 2
    assert "is not a whole number of at least 1" in capsys.readouterr().err

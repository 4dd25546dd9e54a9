"""``privstream explain`` with a ledger: the per-subject guarantee beside the per-record one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from privstream.cli.main import main

CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy:
  epsilon: 1.5
  delta: 1.0e-6
  subject: device_id
  ledger: {window: 1d, epsilon: 4, delta: 1.0e-5, lifetime_epsilon: 30, grace: 2h}
fields:
  - {name: device_id, kind: drop}
  - {name: temp, kind: real, bounds: [-20, 60], epsilon: 1, delta: 1.0e-6}
  - {name: crashed, kind: boolean, epsilon: 0.5}
"""


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    assert main(["explain", "--config", str(path), *args]) == 0
    return capsys.readouterr().out


def test_json_states_the_window_and_lifetime_guarantee(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = json.loads(run(tmp_path, capsys, "--format", "json"))["ledger"]
    # a record costs (1.5, 1e-6): floor(4 / 1.5) = 2 by epsilon, 10 by delta -> 2 per day
    assert ledger["records_per_window"] == 2
    assert ledger["spent_per_window"] == pytest.approx([3.0, 2e-6])
    # floor(30 / 1.5) = 20 records over the lifetime, each delta 1e-6
    assert ledger["records_per_lifetime"] == 20
    assert ledger["lifetime_delta"] == pytest.approx(2e-5)
    assert (ledger["window"], ledger["grace"], ledger["max_future"]) == ("1d", "2h", "5m")
    assert ledger["header"] == "eps=4;delta=1e-05;window=1d;lifetime_eps=30"
    assert ledger["statement"].startswith(
        "for any subject s and any UTC window W, the records of s with timestamps in W that "
        "are released are (4, 1e-05)-DP in aggregate"
    )


def test_the_table_prints_the_per_subject_lines_beside_the_per_record_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(tmp_path, capsys, "--wide")
    assert "per record (event level, basic composition): epsilon=1.5 delta=1e-06" in out
    assert "per subject 'device_id' per 1d UTC window (ledger): epsilon=4 delta=1e-05; " in out
    assert "at most 2 records released per subject and window" in out
    assert "per subject over its lifetime: epsilon=30 delta=2e-05 (at most 20 records" in out
    assert "memoized repeats are charged in full" in out


def test_without_a_ledger_explain_says_the_guarantee_adds_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plain.yaml"
    path.write_text(CONFIG.split("  subject:")[0] + "fields:" + CONFIG.split("fields:")[1])
    assert main(["explain", "--config", str(path), "--wide"]) == 0
    assert "per subject: no ledger (privacy.ledger)" in capsys.readouterr().out


def test_memoized_fields_get_their_caveat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    memo = CONFIG.replace(
        "{name: crashed, kind: boolean, epsilon: 0.5}",
        "{name: crashed, kind: boolean, epsilon: 0.5, memo_identity: message_key}",
    )
    path = tmp_path / "memo.yaml"
    path.write_text(memo, encoding="utf-8")
    assert main(["explain", "--config", str(path), "--wide"]) == 0
    out = capsys.readouterr().out
    assert "ledger and memoized fields (crashed): a memoized answer repeats" in out
    assert "ledger and memoized fields" not in run(tmp_path, capsys, "--wide")

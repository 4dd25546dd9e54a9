"""``privstream explain`` with a ledger and aggregates: what each window costs a subject."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from privstream.cli.main import main

CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy:
  epsilon: 6.0
  delta: 1.0e-5
  subject: user
  ledger: {window: 1d, epsilon: EPS_CAP, delta: 1.0e-5}
fields:
  - {name: user, kind: drop}
  - {name: os, kind: categorical, domain: [ios, android, web], epsilon: 0.5}
aggregates:
  - name: os_hourly
    query: histogram
    field: os
    epsilon: 0.5
    delta: 1.0e-7
    window: {size_seconds: 3600}
    output_topic: agg
    contribution: {records_per_group: 1, groups_per_subject: 1}
  - name: per_90m
    query: count
    epsilon: 0.25
    window: {size_seconds: 5400}
    output_topic: agg
    contribution: {records_per_group: 2, groups_per_subject: 1}
"""


def explain(tmp_path: Path, cap: float, *args: str) -> int:
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG.replace("EPS_CAP", repr(cap)), encoding="utf-8")
    return main(["explain", "--config", str(path), *args])


def test_json_states_each_window_s_charge_per_ledger_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert explain(tmp_path, 8.0, "--format", "json") == 0
    data = json.loads(capsys.readouterr().out)
    hourly, odd = data["ledger"]["aggregates"]["entries"]
    # a changed subject is a removal and an addition: 2 eps, (1 + e^eps) delta
    assert hourly["epsilon"] == 1.0
    assert hourly["delta"] == pytest.approx((1 + math.exp(0.5)) * 1e-7)
    assert (hourly["windows_per_ledger_window"], odd["windows_per_ledger_window"]) == (24, 16)
    assert data["ledger"]["aggregates"]["most_epsilon"] == pytest.approx(24 * 1.0 + 16 * 0.5)
    # the aggregates' own table still gives the sensitivity, scale and expected error
    parts = data["aggregates"]["aggregates"][0]["parts"]
    assert {"sensitivity", "scale", "expected_error"} <= set(parts[0])


def test_text_states_the_per_subject_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert explain(tmp_path, 8.0, "--wide") == 0
    out = capsys.readouterr().out
    assert "os_hourly (per 1h window entered: epsilon=1 delta=2.64872e-07, up to 24" in out
    assert "every window entered would cost epsilon=32" in out
    assert "records and aggregates together: at most epsilon=8 delta=1e-05" in out


def test_a_window_that_can_never_fit_the_cap_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the record costs 0.5 (the field) and fits; os_hourly's window costs 2 x 0.5 = 1.0
    with pytest.raises(SystemExit) as refused:
        explain(tmp_path, 0.999)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "aggregates (os_hourly): one subject's window costs the ledger epsilon 1" in err
    assert "> privacy.ledger.epsilon 0.999" in err

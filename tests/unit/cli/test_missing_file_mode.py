"""``privstream sanitize`` and ``estimate`` on app events with null and absent values (issue 32).

6,000 generated events: a latency that is null in 3% of the records and
absent in 2%, a country with the same gaps. Under ``on_missing: impute``
(with a presence bit) and under ``on_missing: null`` the file sanitizes with
no dead letter, and the estimates over the present values cover the truth.
The sanitizer runs through the real entry point with its noise source
replaced by a seeded one (the numbers are deterministic); each interval
check is at 5 stderrs (false failure below 6e-7 per check for a random seed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from privstream.cli.explain import explain, explain_data
from privstream.cli.main import main
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.pipeline import noise
from privstream.testing import SeededSource

N = 6_000
COUNTRIES = ["US", "DE", "FR"]
#: within 5 stderrs, as the module docstring says
Z = 5.0

IMPUTE = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 13}
fields:
  - {name: user, kind: drop}
  - {name: latency, kind: real, mechanism: laplace, bounds: [0, 500], epsilon: 8,
     on_missing: impute, impute: 500, presence_epsilon: 2}
  - {name: country, kind: categorical, domain: [US, DE, FR], epsilon: 3,
     on_missing: impute, impute: US}
"""
NULL = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 6}
fields:
  - {name: user, kind: drop}
  - {name: latency, kind: real, mechanism: laplace, bounds: [0, 500], epsilon: 3,
     on_missing: null}
  - {name: country, kind: categorical, domain: [US, DE, FR], epsilon: 3, on_missing: null}
"""


def events() -> list[dict[str, Any]]:
    """Latency null in 3% and absent in 2% of the records; the country likewise."""
    rng = np.random.default_rng(32)
    records = []
    for i in range(N):
        record: dict[str, Any] = {
            "user": f"u{i}",
            "latency": float(rng.gamma(4.0, 40.0)),
            "country": str(rng.choice(COUNTRIES, p=[0.5, 0.3, 0.2])),
        }
        for name in ("latency", "country"):
            gap = rng.random()
            if gap < 0.03:
                record[name] = None
            elif gap < 0.05:
                del record[name]
        records.append(record)
    return records


def present(records: list[dict[str, Any]], name: str) -> list[Any]:
    return [r[name] for r in records if r.get(name) is not None]


def clamped_mean(values: list[float]) -> float:
    """What a real field's mean estimates: the mean of the values clamped into [0, 500]."""
    return float(np.mean(np.clip(values, 0.0, 500.0)))


def sanitize(
    tmp_path: Path, config: str, records: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path]:
    (tmp_path / "config.yaml").write_text(config)
    raw = tmp_path / "raw.jsonl"
    raw.write_text("".join(json.dumps(r) + "\n" for r in records))
    monkeypatch.setattr(noise, "KernelSeededAes", lambda: SeededSource(7))
    out, dead = tmp_path / "out.jsonl", tmp_path / "dead.jsonl"
    args = ["--config", str(tmp_path / "config.yaml"), "--input", str(raw)]
    assert main(["sanitize", *args, "--output", str(out), "--dead-letter", str(dead)]) == 0
    return out, dead


def estimate(tmp_path: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    config = str(tmp_path / "config.yaml")
    truth = str(tmp_path / "raw.jsonl")  # parsed as the sanitizer parses it
    args = ["estimate", "--config", config, "--input", str(out), "--format", "json"]
    args += ["--truth", truth]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    return {entry["name"]: entry for entry in report["fields"]}


def covers(block: dict[str, Any], truth: float) -> bool:
    return bool(abs(block["estimate"] - truth) <= Z * block["stderr"])


def test_impute_with_a_presence_bit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    records = events()
    out, dead = sanitize(tmp_path, IMPUTE, records, monkeypatch)
    assert not dead.exists()  # 0 dead letters
    released = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(released) == N
    assert {tuple(sorted(r)) for r in released} == {("country", "latency", "latency_present")}
    fields = estimate(tmp_path, out, capsys)
    latencies = present(records, "latency")
    share = fields["latency"]["present"]["share"]
    assert covers(share, len(latencies) / N)
    bit = {row["value"]: row for row in fields["latency_present"]["frequencies"]}
    assert bit[True]["true"] == pytest.approx(len(latencies) / N)  # the truth of the bit
    assert covers(fields["latency"]["present"]["mean"], clamped_mean(latencies))
    # the plain mean is over every record, absent ones counted as 500: debiasing matters here
    assert not covers(fields["latency"]["mean"], clamped_mean(latencies))
    # without a presence bit the estimate is over every record, absent ones counted as US
    countries = [r.get("country") or "US" for r in records]
    for row in fields["country"]["frequencies"]:
        assert covers(row, countries.count(row["value"]) / N), row
        # the truth counts the imputed values as the release does
        assert row["true"] == pytest.approx(countries.count(row["value"]) / N)


def test_null(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    records = events()
    out, dead = sanitize(tmp_path, NULL, records, monkeypatch)
    assert not dead.exists()
    released = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(released) == N
    for raw, sanitized in zip(records, released, strict=True):
        for name in ("latency", "country"):  # null exactly where absent or null: public
            assert (sanitized[name] is None) == (raw.get(name) is None)
    fields = estimate(tmp_path, out, capsys)
    latencies = present(records, "latency")
    assert fields["latency"]["skipped"] == {"null": N - len(latencies)}
    # the truth skips the nulls as the estimate does: the present values' mean
    assert fields["latency"]["mean"]["true"] == pytest.approx(clamped_mean(latencies))
    assert covers(fields["latency"]["mean"], clamped_mean(latencies))
    countries = present(records, "country")
    for row in fields["country"]["frequencies"]:
        assert covers(row, countries.count(row["value"]) / len(countries)), row


def test_explain_says_what_absence_releases() -> None:
    """The presence bit is a row of its own in the budget; public presence is said in words."""
    for config, words in (
        (IMPUTE, "whether it was present is released only by latency_present"),
        (NULL, "PUBLIC PRESENCE: latency absent or null is released as null"),
    ):
        data = yaml.safe_load(config)
        plan = build_plan(parse_config(data))
        text = explain(parse_config(data), plan, "table")
        assert words in " ".join(text.split())
    config = parse_config(yaml.safe_load(IMPUTE))
    rows = {row["name"]: row for row in explain_data(config, build_plan(config))["fields"]}
    assert rows["latency_present"]["epsilon"] == 2.0
    assert rows["latency_present"]["presence_of"] == "latency"


def test_a_noised_timestamp_beside_an_imputed_field() -> None:
    """A timestamp field (no on_missing: it dead-letters an absent time) composes with a
    presence bit: budget and explain read the missing-value options of the kinds that have
    them only."""
    data = yaml.safe_load(IMPUTE)
    data["privacy"]["epsilon"] = 14
    bounds = ["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"]
    data["fields"].append(
        {"name": "ts", "kind": "timestamp", "granularity": "1h", "bounds": bounds, "epsilon": 1}
    )
    config = parse_config(data)
    plan = build_plan(config)
    assert plan.epsilon == pytest.approx(14.0)  # 8 + 2 (presence) + 3 + 1
    rows = {row["name"]: row for row in explain_data(config, plan)["fields"]}
    assert rows["ts"]["on_missing"] == "dead_letter"

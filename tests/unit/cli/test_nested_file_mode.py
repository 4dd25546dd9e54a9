"""``privstream sanitize`` and ``estimate`` on nested app events with gaps (issue 32, item 1).

6,000 generated events with a nested ``device: {os, app_version}`` and a
nested ``net: {latency, carrier}``: the whole ``net`` object is absent in 2%
of the records and null in 2%, its latency null in 3% more, the OS null in
4%. Under ``on_missing: impute`` (with a presence bit) and ``on_missing:
null`` the file sanitizes with no dead letter, the output keeps the nesting
and only the named keys, and the estimates over the present values cover the
truth. The sanitizer's noise source is a seeded one (deterministic numbers);
each interval check is at 5 stderrs (false failure below 6e-7 per check for a
random seed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from privstream.cli.main import main
from privstream.pipeline import noise
from privstream.testing import SeededSource

N = 6_000
SYSTEMS = ["ios", "android", "web"]
#: within 5 stderrs, as the module docstring says
Z = 5.0

IMPUTE = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 13}
fields:
  - {name: user, kind: drop}
  - {name: device.os, kind: categorical, domain: [ios, android, web], epsilon: 3,
     on_missing: impute, impute: web}
  - {name: device.app_version, kind: public}
  - {path: [net, latency], kind: real, mechanism: laplace, bounds: [0, 500], epsilon: 8,
     on_missing: impute, impute: 500, presence_epsilon: 2}
"""
NULL = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 6}
fields:
  - {name: user, kind: drop}
  - {name: device.os, kind: categorical, domain: [ios, android, web], epsilon: 3,
     on_missing: null}
  - {name: device.app_version, kind: public}
  - {name: net.latency, kind: real, mechanism: laplace, bounds: [0, 500], epsilon: 3,
     on_missing: null}
"""


def events() -> list[dict[str, Any]]:
    rng = np.random.default_rng(321)
    records = []
    for i in range(N):
        record: dict[str, Any] = {
            "user": f"u{i}",
            "device": {
                "os": str(rng.choice(SYSTEMS, p=[0.5, 0.4, 0.1])),
                "app_version": f"2.{i % 4}",
                "imei": f"35-{i}",
            },
            "net": {"latency": float(rng.gamma(4.0, 40.0)), "carrier": "private"},
        }
        gap = rng.random()
        if gap < 0.02:
            del record["net"]
        elif gap < 0.04:
            record["net"] = None
        elif gap < 0.07:
            record["net"]["latency"] = None
        if rng.random() < 0.04:
            record["device"]["os"] = None
        records.append(record)
    return records


def latency(record: dict[str, Any]) -> float | None:
    net = record.get("net")
    return None if net is None else net["latency"]


def clamped_mean(values: list[float]) -> float:
    return float(np.mean(np.clip(values, 0.0, 500.0)))


def sanitize(
    tmp_path: Path, config: str, records: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> list[dict[str, Any]]:
    (tmp_path / "config.yaml").write_text(config)
    raw = tmp_path / "raw.jsonl"
    raw.write_text("".join(json.dumps(r) + "\n" for r in records))
    monkeypatch.setattr(noise, "KernelSeededAes", lambda: SeededSource(11))
    out, dead = tmp_path / "out.jsonl", tmp_path / "dead.jsonl"
    args = ["--config", str(tmp_path / "config.yaml"), "--input", str(raw)]
    assert main(["sanitize", *args, "--output", str(out), "--dead-letter", str(dead)]) == 0
    assert not dead.exists()  # 0 dead letters
    released = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(released) == N
    return released


def estimate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    args = ["estimate", "--config", str(tmp_path / "config.yaml")]
    args += ["--input", str(tmp_path / "out.jsonl"), "--format", "json"]
    assert main([*args, "--truth", str(tmp_path / "raw.jsonl")]) == 0
    report = json.loads(capsys.readouterr().out)
    return {entry["name"]: entry for entry in report["fields"]}


def covers(block: dict[str, Any], truth: float) -> bool:
    return bool(abs(block["estimate"] - truth) <= Z * block["stderr"])


def test_impute_with_a_presence_bit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    records = events()
    released = sanitize(tmp_path, IMPUTE, records, monkeypatch)
    assert {json.dumps([list(r), list(r["device"]), list(r["net"])]) for r in released} == {
        json.dumps([["device", "net"], ["os", "app_version"], ["latency", "latency_present"]])
    }
    fields = estimate(tmp_path, capsys)
    latencies = [v for v in map(latency, records) if v is not None]
    assert covers(fields["net.latency"]["present"]["share"], len(latencies) / N)
    assert covers(fields["net.latency"]["present"]["mean"], clamped_mean(latencies))
    systems = [r["device"]["os"] or "web" for r in records]  # the imputed value counted
    for row in fields["device.os"]["frequencies"]:
        assert covers(row, systems.count(row["value"]) / N), row
        assert row["true"] == pytest.approx(systems.count(row["value"]) / N)


def test_null(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    records = events()
    released = sanitize(tmp_path, NULL, records, monkeypatch)
    for raw, out in zip(records, released, strict=True):
        assert (out["net"]["latency"] is None) == (latency(raw) is None)
        assert (out["device"]["os"] is None) == (raw["device"]["os"] is None)
        assert out["device"]["app_version"] == raw["device"]["app_version"]
    fields = estimate(tmp_path, capsys)
    latencies = [v for v in map(latency, records) if v is not None]
    assert fields["net.latency"]["skipped"] == {"null": N - len(latencies)}
    assert fields["net.latency"]["mean"]["true"] == pytest.approx(clamped_mean(latencies))
    assert covers(fields["net.latency"]["mean"], clamped_mean(latencies))
    systems = [r["device"]["os"] for r in records if r["device"]["os"] is not None]
    for row in fields["device.os"]["frequencies"]:
        assert covers(row, systems.count(row["value"]) / len(systems)), row

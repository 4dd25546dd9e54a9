"""docs/real-event-data.md, re-run: its commands, its config, its blocks (issue 32, item 6).

The page's shell commands run as written, in a fresh directory: the
generator as a subprocess, ``privstream`` through its entry point with the
noise source replaced by a seeded one (the estimates are deterministic).
5,000 events with null, absent and partial fields (a nested ``device``
object absent, null or without ``app_version`` on some) sanitize with no dead
letter, the output keeps the nesting, and the estimates (over the present
values, and the nested fields' shares with a missing one counted as
``unknown``) cover the truth at 5 stderrs (a false failure below 6e-7 per
check for a random seed). The documented outputs must have the shape of a
fresh run's; deterministic lines must match exactly.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from privstream.cli.main import main
from privstream.pipeline import noise
from privstream.testing import SeededSource

from tests.project.test_docs import code_blocks, commands, json_documents

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "real-event-data.md"
EXAMPLE = ROOT / "examples" / "app-events.yaml"
Z = 5.0
KEYS = [
    "ts", "event", "country", "device", "latency_ms", "latency_ms_present", "cart_value",
    "cart_value_present", "tags",
]  # fmt: skip
OSES = {"android", "ios", "web", "unknown"}
VERSIONS = {"5.2.1", "5.2.0", "5.1.3", "5.0.9", "unknown"}


def blocks(lang: str) -> list[str]:
    return [body for language, body in code_blocks(PAGE) if language == lang]


def run(command: str, cwd: Path) -> int:
    """One command of the page, run in ``cwd`` (``examples/`` is the checkout's)."""
    words = [ROOT / w if w.startswith("examples/") else w for w in command.split()]
    if words[0] == "python3":
        target = words.index(">")
        with (cwd / str(words[target + 1])).open("w") as out:
            argv = [sys.executable, *map(str, words[1:target])]
            return subprocess.run(argv, cwd=cwd, stdout=out, check=False).returncode
    assert words[0] == "privstream", command
    return main([str(w) for w in words[1:]])


@pytest.fixture
def ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    """Every command of the page's shell blocks, in order: each one's exit code and output."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(noise, "KernelSeededAes", lambda: SeededSource(32))
    done: dict[str, Any] = {"dir": tmp_path}
    for body in blocks("sh"):
        for command in commands(body):
            code = run(command, tmp_path)
            captured = capsys.readouterr()
            done[command.split()[1]] = (code, captured.out, captured.err)
    return done


def test_the_page_runs_end_to_end_with_no_dead_letter(ran: dict[str, Any]) -> None:
    here: Path = ran["dir"]
    for step in ("examples/app_events.py", "explain", "sanitize", "estimate"):
        assert ran[step][0] == 0, (step, ran[step][2][-2000:])
    raw = [json.loads(line) for line in (here / "app-events.jsonl").read_text().splitlines()]
    assert len(raw) == 5000
    # the data is as the page says: nulls, absences, carts on purchases only, unknown countries
    assert 100 < sum(1 for r in raw if "latency_ms" in r and r["latency_ms"] is None) < 200
    assert 50 < sum(1 for r in raw if "latency_ms" not in r) < 150
    assert all(("cart_value" in r) == (r["event"] == "purchase") for r in raw)
    assert any(r["country"] == "BR" for r in raw) and any("tags" not in r for r in raw)
    # the nested object: absent on some events, null on some, without app_version on some
    assert 100 < sum(1 for r in raw if "device" not in r) < 200
    assert 50 < sum(1 for r in raw if "device" in r and r["device"] is None) < 150
    assert 100 < sum(1 for r in raw if r.get("device") and "app_version" not in r["device"]) < 300
    assert not (here / "dead-letters.jsonl").exists()
    assert "5000 records in, 5000 sanitized, 0 dead-lettered" in ran["sanitize"][2]
    out = [json.loads(line) for line in (here / "sanitized.jsonl").read_text().splitlines()]
    assert len(out) == 5000
    for released in out:  # every output has the nested shape, whatever its input lacked
        assert list(released) == KEYS and list(released["device"]) == ["os", "app_version"]
        assert released["device"]["os"] in OSES
        assert released["device"]["app_version"] in VERSIONS
    explained = " ".join(ran["explain"][1].split())
    for said in (
        "latency_ms absent or null is noised as 0; whether it was present is released only "
        "by latency_ms_present (randomized response, epsilon=0.5)",
        "NOT PRIVATE: ts is truncated to 1h and released as is",
        'device.os absent or null is noised as "unknown"; its value never shows whether it '
        "was present",
        "per record (event level, basic composition): epsilon=8",
    ):
        assert said in explained


def covers(block: dict[str, Any], truth: float) -> bool:
    return bool(abs(block["estimate"] - truth) <= Z * block["stderr"])


def device_value(record: dict[str, Any], key: str) -> Any:
    """``device.<key>`` of a raw event, ``unknown`` (the imputed value) where it is missing."""
    return (record.get("device") or {}).get(key, "unknown")


def test_the_estimates_cover_the_truth(
    ran: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    here: Path = ran["dir"]
    args = ["estimate", "--config", str(EXAMPLE), "--input", str(here / "sanitized.jsonl")]
    assert main([*args, "--format", "json", "--truth", str(here / "app-events.jsonl")]) == 0
    fields = {f["name"]: f for f in json.loads(capsys.readouterr().out)["fields"]}
    raw = [json.loads(line) for line in (here / "app-events.jsonl").read_text().splitlines()]
    for row in fields["event"]["frequencies"]:
        assert covers(row, sum(r["event"] == row["value"] for r in raw) / 5000), row
    for name in ("latency_ms", "cart_value"):
        present = [r[name] for r in raw if r.get(name) is not None]
        upper = {"latency_ms": 2000, "cart_value": 500}[name]
        block = fields[name]["present"]
        assert covers(block["share"], len(present) / 5000), name
        assert covers(block["mean"], sum(min(v, upper) for v in present) / len(present)), name
    for name, key in (("device.os", "os"), ("device.app_version", "app_version")):
        rows = fields[name]["frequencies"]
        assert {row["value"] for row in rows} == (OSES if key == "os" else VERSIONS)
        for row in rows:
            truth = sum(device_value(r, key) == row["value"] for r in raw) / 5000
            assert row["true"] == pytest.approx(truth), row  # --truth reads the nested path
            assert covers(row, truth), row
    for row in fields["tags"]["frequencies"]:
        assert covers(row, sum(row["value"] in r.get("tags", []) for r in raw) / 5000), row


def shown_lines() -> list[int]:
    """The line numbers the page gives for the events it shows ("lines 1, 9 ... and 157")."""
    found = re.search(r"lines ([\d, ]+) and (\d+) of the file", " ".join(PAGE.read_text().split()))
    assert found, "the page names the lines of the events it shows"
    return [int(n) for n in found[1].split(",")] + [int(found[2])]


def test_the_page_shows_the_generators_events_and_outputs_of_their_shape(
    ran: dict[str, Any],
) -> None:
    here: Path = ran["dir"]
    shown_in, shown_out = (json_documents(body) for body in blocks("json"))
    generated = (here / "app-events.jsonl").read_text().splitlines()
    lines = shown_lines()
    assert shown_in == [json.loads(generated[n - 1]) for n in lines]
    # the shown events hold each case the page names: no device, a null one, no app_version
    assert [n for n, r in zip(lines, shown_in, strict=True) if "device" not in r] == [9]
    assert [n for n, r in zip(lines, shown_in, strict=True) if r.get("device", 0) is None] == [157]
    assert [n for n, r in zip(lines, shown_in, strict=True) if r.get("device") and
            "app_version" not in r["device"]] == [25]  # fmt: skip
    fresh = [json.loads(line) for line in (here / "sanitized.jsonl").read_text().splitlines()]
    assert len(shown_out) == len(lines)
    for shown, n, src in zip(shown_out, lines, shown_in, strict=True):
        run_out = fresh[n - 1]
        assert list(shown) == list(run_out) == KEYS
        assert list(shown["device"]) == list(run_out["device"]) == ["os", "app_version"]
        hour = datetime.fromisoformat(src["ts"]).astimezone(UTC).strftime("%Y-%m-%dT%H:00:00Z")
        assert shown["ts"] == run_out["ts"] == hour  # the input's hour in UTC: no noise


def test_the_page_config_is_the_example_config() -> None:
    example = yaml.safe_load(EXAMPLE.read_text())
    (shown,) = (yaml.safe_load(body) for body in blocks("yaml"))
    assert shown == {"privacy": example["privacy"], "fields": example["fields"]}


def check_estimate_block(body: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The documented estimate has the shape of a fresh run's: the same lines where they
    hold no noise (headers, value names, notes' starts), never the same numbers."""
    data = tmp_path / "app-events.jsonl"
    generator = [sys.executable, str(ROOT / "examples" / "app_events.py")]
    with data.open("w") as out:
        subprocess.run([*generator, "--records", "5000", "--seed", "32"], stdout=out, check=True)
    sanitized = tmp_path / "sanitized.jsonl"
    args = ["--config", str(EXAMPLE), "--input", str(data), "--output", str(sanitized)]
    with pytest.MonkeyPatch.context() as patch:  # seeded: a run whose notes are the page's
        patch.setattr(noise, "KernelSeededAes", lambda: SeededSource(32))
        assert main(["sanitize", *args, "--dead-letter", str(tmp_path / "dead.jsonl")]) == 0
    capsys.readouterr()
    assert main(["estimate", "--config", str(EXAMPLE), "--input", str(sanitized)]) == 0
    fresh = capsys.readouterr().out.replace(str(sanitized), "sanitized.jsonl")

    def skeleton(text: str) -> list[str]:
        """Each line's words that are not numbers (the noise), in order."""
        return [
            " ".join(w for w in re.split(r"[\s\[\],]+", line) if not re.search(r"\d", w))
            for line in text.splitlines()
        ]

    # rows are sorted by estimate, which the noise may reorder: the same lines, in any order
    assert sorted(skeleton(body)) == sorted(skeleton(fresh))
    headers = [line for line in body.splitlines() if "eps=" in line]
    assert headers == [line for line in fresh.splitlines() if "eps=" in line]

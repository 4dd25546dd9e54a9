"""docs/real-event-data.md, re-run: its commands, its config, its blocks (issue 32, item 6).

The page's shell commands run as written, in a fresh directory: the
generator as a subprocess, ``privstream`` through its entry point with the
noise source replaced by a seeded one (the estimates are deterministic).
5,000 events with null, absent and partial fields sanitize with no dead
letter, and the estimates over the present values cover the truth at 5
stderrs (a false failure below 6e-7 per check for a random seed). The
documented outputs must have the shape of a fresh run's; deterministic lines
must match exactly.
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
    assert not (here / "dead-letters.jsonl").exists()
    assert "5000 records in, 5000 sanitized, 0 dead-lettered" in ran["sanitize"][2]
    out = (here / "sanitized.jsonl").read_text().splitlines()
    assert len(out) == 5000
    explained = " ".join(ran["explain"][1].split())
    for said in (
        "latency_ms absent or null is noised as 0; whether it was present is released only "
        "by latency_ms_present (randomized response, epsilon=0.5)",
        "NOT PRIVATE: ts is truncated to 1h and released as is",
        "per record (event level, basic composition): epsilon=6",
    ):
        assert said in explained


def covers(block: dict[str, Any], truth: float) -> bool:
    return bool(abs(block["estimate"] - truth) <= Z * block["stderr"])


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
    for row in fields["tags"]["frequencies"]:
        assert covers(row, sum(row["value"] in r.get("tags", []) for r in raw) / 5000), row


def test_the_page_shows_the_generators_events_and_outputs_of_their_shape(
    ran: dict[str, Any],
) -> None:
    here: Path = ran["dir"]
    shown_in, shown_out = (json_documents(body) for body in blocks("json"))
    generated = (here / "app-events.jsonl").read_text().splitlines()
    assert shown_in == [json.loads(line) for line in generated[: len(shown_in)]]
    fresh = [json.loads(line) for line in (here / "sanitized.jsonl").read_text().splitlines()]
    for shown, run_out, src in zip(shown_out, fresh, shown_in, strict=False):
        assert list(shown) == list(run_out) == [
            "ts", "event", "country", "latency_ms", "latency_ms_present", "cart_value",
            "cart_value_present", "tags",
        ]  # fmt: skip
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

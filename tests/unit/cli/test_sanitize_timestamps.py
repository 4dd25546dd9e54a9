"""File mode on real-shaped app events carrying ISO timestamps (issue 32, item 3).

5,000 events as a product team emits them: a user id, an ISO 8601 time with
a UTC offset (``Z``, ``+02:00``, ``-05:00``, with and without milliseconds),
an event type, and the client's clock as epoch milliseconds. The event time
is released truncated to the hour (public, as is), the client time as a day
with noise; no record is dead-lettered, and ``estimate`` recovers the mean
day of the client times.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from privstream.cli.main import main
from privstream.cli.metadata import sidecar_path, write_sidecar
from privstream.cli.sanitize import sanitize_stream
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.testing import SeededSource

N = 5_000
START = datetime(2026, 11, 1, tzinfo=UTC)
CONFIG = """\
kafka: {input_topic: raw, output_topic: out, dead_letter_topic: dlq}
privacy: {epsilon: 3.0}
fields:
  - {name: user_id, kind: drop}
  - {name: ts, kind: timestamp, granularity: 1h}
  - {name: event, kind: categorical, domain: [view, click, purchase], epsilon: 1.0}
  - {name: client_ms, kind: timestamp, epoch_unit: ms, granularity: 1d, output: epoch_ms,
     epsilon: 2.0, bounds: ["2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"]}
"""
ZONES = [timedelta(0), timedelta(hours=2), timedelta(hours=-5), timedelta(hours=5, minutes=30)]


def events(seed: int) -> tuple[list[bytes], list[datetime]]:
    """The raw lines and each event's true UTC time."""
    rng = np.random.default_rng(seed)
    lines, times = [], []
    for i in range(N):
        at = START + timedelta(seconds=int(rng.integers(0, 29 * 86_400)), milliseconds=int(i % 7))
        zone = ZONES[i % len(ZONES)]
        local = at.astimezone(timezone(zone))
        text = local.isoformat(timespec="milliseconds" if i % 2 else "seconds")
        text = text.replace("+00:00", "Z") if i % 3 else text
        skew = timedelta(seconds=int(rng.integers(-300, 300)))
        client = int((at + skew).timestamp() * 1000)
        event = ("view", "click", "purchase")[int(rng.integers(0, 3))]
        record = {"user_id": f"u{i % 97}", "ts": text, "event": event, "client_ms": client}
        lines.append(json.dumps(record).encode())
        times.append(at)
    return lines, times


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("timestamps")
    config = base / "config.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    lines, times = events(seed=32)
    raw = base / "raw.jsonl"
    raw.write_bytes(b"\n".join(lines) + b"\n")
    return {"base": base, "config": config, "raw": raw, "lines": lines, "times": times}


def test_every_event_is_released_and_truncated_to_the_hour(
    written: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    base: Path = written["base"]
    out, dead = base / "out.jsonl", base / "dead.jsonl"
    args = ["--config", str(written["config"]), "--input", str(written["raw"])]
    code = main(["sanitize", *args, "--output", str(out), "--dead-letter", str(dead)])
    assert code == 0, capsys.readouterr().err
    assert not dead.exists()  # created only when a record is dead-lettered
    released = [json.loads(line) for line in out.read_bytes().splitlines()]
    assert len(released) == N
    for record, at in zip(released, written["times"], strict=True):
        assert list(record) == ["ts", "event", "client_ms"]
        assert record["ts"] == at.replace(minute=0, second=0, microsecond=0).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
        assert type(record["client_ms"]) is int and record["client_ms"] % 86_400_000 == 0


def test_estimate_recovers_the_mean_client_day(
    written: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Noise from a fixed seed; the check allows 4 standard errors (a normal deviation that
    large has probability 6e-5, so another seed fails about that often)."""
    base: Path = written["base"]
    plan = build_plan(parse_config(yaml.safe_load(CONFIG)))
    sanitized = base / "seeded.jsonl"
    out = io.BytesIO()
    sanitize_stream(plan, written["lines"], out, str(base / "seeded-dead.jsonl"), SeededSource(7))
    sanitized.write_bytes(out.getvalue())
    write_sidecar(sidecar_path(str(sanitized)), plan, N)
    args = ["--config", str(written["config"]), "--input", str(sanitized), "--format", "json"]
    code = main(["estimate", *args, "--field", "client_ms", "--truth", str(written["raw"])])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    (entry,) = json.loads(captured.out)["fields"]
    assert entry["records"] == N and entry["skipped"] == {} and entry["unit"] == "1d"
    mean = entry["mean"]
    # the truth is the parsed client times' days: the event days but for minutes of skew
    event_day = np.mean([at.timestamp() // 86_400 for at in written["times"]])
    assert abs(mean["true"] - float(event_day)) < 0.01
    assert abs(mean["estimate"] - mean["true"]) <= 4 * mean["stderr"]
    assert mean["stderr"] < 1.0  # days: 5,000 records average the noise down

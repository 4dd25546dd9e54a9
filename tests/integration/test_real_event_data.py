"""docs/real-event-data.md's events through a real worker on a real broker (issue 32, item 6).

The 5,000 app events of ``examples/app_events.py`` (nulls, absent fields, a
nested ``device`` object absent, null or without ``app_version`` on some, a
cart value on purchases only, countries outside the domain, missing tags)
under ``examples/app-events.yaml``: every event is released, nothing is
dead-lettered, every output has the same keys in the same order (``device``
nested, with its two keys) with its time cut to the UTC hour, and the
nested fields' shares estimated from the outputs cover the truth.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests.support.broker import create_topics
from tests.support.worker_proc import (
    Collector,
    WorkerProcess,
    decode,
    produce,
    read_all,
    unique_topics,
    write_config,
)

ROOT = Path(__file__).resolve().parents[2]
N = 5_000
#: an estimate within 5 stderrs of the truth: a false failure below 6e-7 per row (9 rows)
Z = 5.0
KEYS = [
    "ts", "event", "country", "device", "latency_ms", "latency_ms_present", "cart_value",
    "cart_value_present", "tags",
]  # fmt: skip


async def estimate_topic(config: Path, truth: Path) -> dict[str, Any]:
    """``privstream estimate --topic`` over what the worker committed, beside the truth."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "privstream.cli.main", "estimate", "--config", str(config),
        "--topic", "--format", "json", "--truth", str(truth), "--field", "device.os",
        "--field", "device.app_version",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    return {f["name"]: f for f in json.loads(out)["fields"]}


def events() -> list[dict[str, object]]:
    generator = [sys.executable, str(ROOT / "examples" / "app_events.py")]
    out = subprocess.run([*generator, "--records", str(N), "--seed", "32"], check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    return [json.loads(line) for line in out.splitlines()]


async def test_every_app_event_is_released_and_none_dead_lettered(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    example = yaml.safe_load((ROOT / "examples" / "app-events.yaml").read_text())
    kafka = unique_topics("app-events")
    await create_topics(kafka_bootstrap, [kafka["input_topic"], kafka["output_topic"]], 2)
    await create_topics(kafka_bootstrap, [kafka["dead_letter_topic"]], 2)
    body = {"privacy": example["privacy"], "fields": example["fields"]}
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, body)
    raw = events()
    assert any("latency_ms" not in r for r in raw) and any(
        r.get("latency_ms", 0) is None for r in raw
    )
    assert any("device" not in r for r in raw) and any(r.get("device", 0) is None for r in raw)
    assert any(isinstance(d := r.get("device"), dict) and "app_version" not in d for r in raw)
    truth = tmp_path / "app-events.jsonl"
    truth.write_text("".join(json.dumps(r) + "\n" for r in raw))
    messages = [(str(r["user_id"]).encode(), json.dumps(r).encode(), []) for r in raw]
    await produce(kafka_bootstrap, kafka["input_topic"], messages)
    async with Collector(kafka_bootstrap, kafka["output_topic"]) as seen:
        worker = WorkerProcess(config, tmp_path / "worker.log")
        await worker.start()
        outputs = decode(await seen.wait_for(N, within_s=120))
        assert await worker.terminate() == 0, worker.log_text()[-3000:]
    assert await read_all(kafka_bootstrap, kafka["dead_letter_topic"], 2) == []
    assert len(outputs) == N
    hours = sorted(
        datetime.fromisoformat(str(r["ts"])).astimezone(UTC).strftime("%Y-%m-%dT%H:00:00Z")
        for r in raw
    )
    assert sorted(str(o["ts"]) for o in outputs) == hours
    for released in outputs:
        assert list(released) == KEYS
        assert all(isinstance(released[k], float) for k in ("latency_ms", "cart_value"))
        assert all(isinstance(released[k], bool) for k in KEYS if k.endswith("_present"))
        assert list(released["device"]) == ["os", "app_version"]  # the nesting, kept
    domains = {f["name"]: f["domain"] for f in example["fields"] if "domain" in f}
    fields = await estimate_topic(config, truth)
    for name in ("device.os", "device.app_version"):
        rows = fields[name]["frequencies"]
        assert {row["value"] for row in rows} == set(domains[name])
        for row in rows:  # "true" counts a missing device or app_version as "unknown"
            assert abs(row["estimate"] - row["true"]) <= Z * row["stderr"], (name, row)

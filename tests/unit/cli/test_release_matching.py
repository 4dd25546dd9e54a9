"""``estimate`` matches records to ``--config`` field by field, by release id.

Reordering the config's fields or adding one keeps earlier records usable
for every unchanged field; only a field whose release changed is refused,
by name, with the reason. Files are matched through their release metadata,
topic messages through the ``privstream-field-releases`` header.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from privstream.cli.main import main
from privstream.config import parse_config
from privstream.estimate.source import Expected, TopicRead, _deliver
from privstream.kinds import build_plan
from privstream.pipeline import RecordPlan
from privstream.worker.produce import output_headers

KAFKA = {"input_topic": "raw", "output_topic": "clean", "dead_letter_topic": "dlq"}
FIELDS = [
    {"name": "temp", "kind": "real", "mechanism": "laplace", "bounds": [-20, 60], "epsilon": 2},
    {"name": "state", "kind": "categorical", "domain": ["TX", "CA", "NY"], "epsilon": 2},
    {"name": "ok", "kind": "boolean", "epsilon": 1},
]
ADDED = {"name": "steps", "kind": "integer", "bounds": [0, 9], "epsilon": 1}
N = 500


def _config(fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kafka": KAFKA, "privacy": {"epsilon": 8}, "fields": fields}


def _write(path: Path, fields: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump(_config(fields)))
    return path


def _plan(fields: list[dict[str, Any]]) -> RecordPlan:
    return build_plan(parse_config(_config(fields)))


@pytest.fixture
def released(tmp_path: Path) -> dict[str, Path]:
    rng = np.random.default_rng(11)
    raw = tmp_path / "raw.jsonl"
    rows = [
        {
            "temp": float(rng.uniform(-10, 50)),
            "state": str(rng.choice(["TX", "CA", "NY"])),
            "ok": bool(rng.random() < 0.5),
            "steps": int(rng.integers(0, 10)),
        }
        for _ in range(N)
    ]
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = _write(tmp_path / "a.yaml", FIELDS)
    out = tmp_path / "out.jsonl"
    args = ["sanitize", "--config", str(config), "--input", str(raw), "--output", str(out)]
    assert main([*args, "--dead-letter", str(tmp_path / "dead.jsonl")]) == 0
    return {"tmp": tmp_path, "config": config, "out": out}


def _estimate(capsys: pytest.CaptureFixture[str], config: Path, out: Path) -> tuple[int, Any, str]:
    capsys.readouterr()
    code = main(["estimate", "--config", str(config), "--input", str(out), "--format", "json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out else None, captured.err


def _by_name(report: dict[str, Any]) -> dict[str, Any]:
    return {entry["name"]: entry for entry in report["fields"]}


def test_reordered_and_added_fields_keep_earlier_records_usable(
    released: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, same, err = _estimate(capsys, released["config"], released["out"])
    assert code == 0 and "warning" not in err, err
    reordered = _write(released["tmp"] / "b.yaml", [FIELDS[2], FIELDS[0], FIELDS[1]])
    code, report, err = _estimate(capsys, reordered, released["out"])
    assert code == 0 and "warning" not in err, err
    assert _by_name(report) == _by_name(same)  # the same numbers, whatever the order
    added = _write(released["tmp"] / "c.yaml", [FIELDS[1], ADDED, *FIELDS[::2]])
    code, report, err = _estimate(capsys, added, released["out"])
    assert code == 0
    assert _by_name(report) == _by_name(same)
    assert report["source"]["refused"] == {
        "steps": {"reason": "not released in these records (a field added to the config since)"}
    }
    assert "warning: field steps refused: not released in these records" in err


def test_a_changed_field_is_refused_by_name_with_the_reason(
    released: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    wider = {**FIELDS[0], "bounds": [-40, 60]}
    changed = _write(released["tmp"] / "d.yaml", [wider, *FIELDS[1:]])
    code, report, err = _estimate(capsys, changed, released["out"])
    assert code == 0
    assert sorted(_by_name(report)) == ["ok", "state"]
    reason = report["source"]["refused"]["temp"]["reason"]
    assert reason.startswith("params {") and "there" in reason and "here" in reason
    assert f"warning: field temp refused: {reason}" in err


class _Message:
    def __init__(self, plan: RecordPlan, value: bytes) -> None:
        self.headers = output_headers(plan)
        self.value = value
        self.partition = 0


def test_topic_records_are_matched_field_by_field() -> None:
    today = _plan([*FIELDS, ADDED])
    reordered = _plan([FIELDS[2], ADDED, FIELDS[0], FIELDS[1]])
    earlier = _plan(FIELDS)  # before steps was added
    changed = _plan([{**FIELDS[0], "epsilon": 1.5}, *FIELDS[1:], ADDED])
    elsewhere = _plan([{**f, "epsilon": 0.5} for f in FIELDS])  # nothing in common
    expected = Expected(today.config_sha256, today.release_sha256, today.field_releases)
    read, sunk, skipped = TopicRead("clean"), [], []

    def sink(value: bytes, refused: frozenset[str] = frozenset()) -> None:
        sunk.append((value, refused))

    for plan in (today, reordered, earlier, changed, elsewhere):
        _deliver(_Message(plan, b"{}"), read, expected, sink, skipped.append)
    assert [refused for _, refused in sunk] == [
        frozenset(),
        frozenset(),
        frozenset({"steps"}),
        frozenset({"temp"}),
    ]
    assert skipped == ["config_mismatch"]  # every field of another release
    assert read.field_mismatch == {"steps": 1, "temp": 1}
    assert read.field_reasons["steps"].startswith("not released in these records")
    assert read.field_reasons["temp"].startswith("released under another release id")


def test_a_refused_field_is_not_counted_for_that_record() -> None:
    from privstream.estimate import Options, StreamAggregate

    stream = StreamAggregate(_plan(FIELDS), Options())
    record = b'{"temp": 10.0, "state": "TX", "ok": true}'
    stream.add(record)
    stream.add(record, frozenset({"temp"}))
    stream.flush()
    fields = {acc.name: acc for acc in stream.fields}
    assert (fields["temp"].records, fields["temp"].skipped) == (1, {"other_release": 1})
    assert fields["state"].records == fields["ok"].records == 2


def test_a_dump_without_headers_is_estimated_with_the_release_metadata_of_its_config(
    released: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    dump = released["tmp"] / "dump.jsonl"  # the records as a header-dropping tool copies them
    dump.write_bytes(released["out"].read_bytes())
    meta = released["tmp"] / "release.json"
    args = ["explain", "--config", str(released["config"]), "--release-metadata", str(meta)]
    assert main(args) == 0
    written = json.loads(meta.read_text())
    assert (written["written_by"], written["records"]) == ("explain", None)
    capsys.readouterr()
    code = main(["estimate", "--config", str(released["config"]), "--input", str(dump)])
    assert code == 2 and "no release metadata" in capsys.readouterr().err
    changed = _write(released["tmp"] / "e.yaml", [{**FIELDS[0], "epsilon": 1.5}, *FIELDS[1:]])
    for config, warned in ((released["config"], False), (changed, True)):
        code = main(
            ["estimate", "--config", str(config), "--input", str(dump),
             "--release-metadata", str(meta)]
        )  # fmt: skip
        err = capsys.readouterr().err
        assert code == 0, err
        assert ("warning: field temp refused: epsilon 2.0 there, 1.5 here" in err) == warned

"""``privstream sanitize`` on Avro Object Container Files: real files, written by fastavro.

The equivalence tests run the same records through file mode twice with one
seeded source, once as JSON Lines and once as a container file (or once to
each output format): the releases must be the same values, so whatever the
JSON Lines tests establish holds for Avro files too.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest
import yaml
from privstream.cli.avro_files import AvroOutput, avro_chunks, reads_avro
from privstream.cli.main import main
from privstream.cli.metadata import sidecar_path, write_sidecar
from privstream.cli.sanitize import sanitize_stream
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.pipeline.avro_encode import plain
from privstream.pipeline.avro_schema import hash_report_fields
from privstream.testing import SeededSource

CONFIG = """\
privacy: {epsilon: 20, delta: 1.0e-5}
fields:
  - {name: device_id, kind: drop}
  - {name: ts, kind: public}
  - {name: device.os, kind: categorical, domain: [ios, android, other], unknown_as: other,
     epsilon: 2}
  - {name: salary, kind: real, mechanism: laplace, bounds: [1000, 5000], epsilon: 3}
  - {name: ok, kind: boolean, epsilon: 1}
  - {name: clicks, kind: integer, bounds: [0, 4], epsilon: 3, on_missing: "null"}
"""
#: for Avro output: every released name an Avro name (no ``device.os``)
FLAT_CONFIG = """\
privacy: {epsilon: 20, delta: 1.0e-5}
fields:
  - {name: device_id, kind: drop}
  - {name: ts, kind: public}
  - {name: salary, kind: real, mechanism: laplace, bounds: [1000, 5000], epsilon: 3}
  - {name: state, kind: categorical, domain: [TX, CA, NY, other], unknown_as: other, epsilon: 2}
  - {name: ok, kind: boolean, epsilon: 1}
  - {name: clicks, kind: integer, bounds: [0, 4], epsilon: 3, on_missing: "null"}
  - {name: url, kind: categorical, mechanism: local_hashing, epsilon: 3}
  - {name: hobbies, kind: set, universe: [chess, golf, judo], max_items: 2, epsilon: 2}
"""
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Raw",
    "namespace": "test",
    "fields": [
        {"name": "device_id", "type": "string"},
        {"name": "ts", "type": "long"},
        {
            "name": "device",
            "type": {
                "type": "record",
                "name": "Device",
                "fields": [{"name": "os", "type": "string"}],
            },
        },
        {"name": "salary", "type": "double"},
        {"name": "state", "type": "string"},
        {"name": "ok", "type": ["null", "boolean"]},
        {"name": "clicks", "type": ["null", "long"], "default": None},
        {"name": "url", "type": "string"},
        {"name": "hobbies", "type": {"type": "array", "items": "string"}},
        {"name": "secret", "type": "bytes"},
    ],
}
N = 300
#: the record whose ``ok`` is null: dead-lettered (``ok`` has the default on_missing)
NULL_OK = 7


def _records() -> list[dict[str, Any]]:
    return [
        {
            "device_id": f"DEVICE-CANARY-{i}",
            "ts": 1_700_000_000 + i,
            "device": {"os": ["ios", "android", "web"][i % 3]},
            "salary": 1000.0 + 13.5 * i,
            "state": ["TX", "CA", "NY", "ZZ"][i % 4],
            "ok": None if i + 1 == NULL_OK else i % 2 == 0,
            "clicks": None if i % 5 == 0 else i % 7,
            "url": f"u{i % 9}.example",
            "hobbies": [["chess"], [], ["golf", "judo"]][i % 3],
            "secret": b"SECRET-CANARY\xff",
        }
        for i in range(N)
    ]


def _avro_file(path: Path, records: list[dict[str, Any]], codec: str = "deflate") -> Path:
    with path.open("wb") as handle:
        fastavro.writer(handle, SCHEMA, records, codec=codec)
    return path


def _json_lines(records: list[dict[str, Any]]) -> list[bytes]:
    """The same records as JSON Lines (bytes have no JSON form: left out)."""
    return [json.dumps({k: v for k, v in r.items() if k != "secret"}).encode() for r in records]


def _plan(text: str) -> Any:
    return build_plan(parse_config(yaml.safe_load(text)))


def test_container_records_release_as_the_same_records_in_json_lines(tmp_path: Path) -> None:
    records = _records()
    avro = _avro_file(tmp_path / "raw.avro", records)
    plan = _plan(CONFIG)
    from_json, from_avro = io.BytesIO(), io.BytesIO()
    dead_json = sanitize_stream(
        plan, _json_lines(records), from_json, str(tmp_path / "dj"), SeededSource(5)
    )
    with avro.open("rb") as handle:
        dead_avro = sanitize_stream(
            plan,
            handle,
            from_avro,
            str(tmp_path / "da"),
            SeededSource(5),
            chunks=avro_chunks(handle, str(avro)),  # type: ignore[arg-type]
        )
    assert from_avro.getvalue() == from_json.getvalue()
    assert dead_avro.records_out == dead_json.records_out == N - 1
    assert dict(dead_avro.reasons) == dict(dead_json.reasons) and dead_avro.dead_lettered == 1


def test_sanitize_reads_an_avro_file_by_its_magic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG)
    avro = _avro_file(tmp_path / "raw.avro", _records())
    out, dead = tmp_path / "out.jsonl", tmp_path / "dead.jsonl"
    args = ["--input", str(avro), "--output", str(out), "--dead-letter", str(dead)]
    code = main(["sanitize", "--config", str(tmp_path / "c.yaml"), *args])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"{N} records in, {N - 1} sanitized, 1 dead-lettered" in err
    text = out.read_bytes()
    assert b"CANARY" not in text  # the dropped id and the unlisted bytes field
    released = [json.loads(line) for line in text.splitlines()]
    assert all(set(r) == {"ts", "device", "salary", "ok", "clicks"} for r in released)
    expected_ts = [1_700_000_000 + i for i in range(N) if i + 1 != NULL_OK]
    assert [r["ts"] for r in released] == expected_ts
    assert {r["device"]["os"] for r in released} == {"ios", "android", "other"}
    letter = json.loads(dead.read_text())
    assert letter["record"] == NULL_OK and "line" not in letter
    assert letter["reason"] and "ok" in letter["detail"]
    assert json.loads(letter["raw"])["device_id"] == f"DEVICE-CANARY-{NULL_OK - 1}"


def test_avro_output_holds_the_json_output_under_the_derived_schema(tmp_path: Path) -> None:
    records = _records()
    plan = _plan(FLAT_CONFIG)
    lines = _json_lines(records)
    as_json, as_avro = io.BytesIO(), io.BytesIO()
    sanitize_stream(plan, lines, as_json, str(tmp_path / "dj"), SeededSource(11))
    output = AvroOutput(parse_config(yaml.safe_load(FLAT_CONFIG)), plan)
    summary = sanitize_stream(
        plan, lines, as_avro, str(tmp_path / "da"), SeededSource(11), output=output
    )
    as_avro.seek(0)
    read = fastavro.reader(as_avro)
    schema = read.writer_schema
    assert schema is not None and schema["name"] == "privstream.Sanitized"
    assert [f["name"] for f in schema["fields"]] == [f.name for f in plan.fields]
    reports = hash_report_fields(plan)
    decoded = [plain(record, reports) for record in read]
    assert len(decoded) == summary.records_out == N - 1
    assert decoded == [json.loads(line) for line in as_json.getvalue().splitlines()]
    assert any(r["url"]["seed"] >= 2**63 for r in decoded)  # the signed-long seeds, unsigned


def test_estimate_reads_an_avro_output_as_its_json_twin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text(FLAT_CONFIG)
    plan = _plan(FLAT_CONFIG)
    lines = _json_lines(_records())
    output = AvroOutput(parse_config(yaml.safe_load(FLAT_CONFIG)), plan)
    reports = []
    for name, writer in (("out.jsonl", None), ("out.avro", output)):
        target = tmp_path / name
        with target.open("wb") as handle:
            summary = sanitize_stream(
                plan, lines, handle, str(tmp_path / f"{name}.dead"), SeededSource(3), output=writer
            )
        write_sidecar(sidecar_path(str(target)), plan, summary.records_out)
        code = main(
            [
                "estimate",
                "--config",
                str(tmp_path / "c.yaml"),
                "--input",
                str(target),
                "--format",
                "json",
            ]
        )
        captured = capsys.readouterr()
        assert code == 0, captured.err
        report = json.loads(captured.out)
        report.pop("source")
        reports.append(report)
    assert reports[0] == reports[1]
    assert reports[0]["records_read"] == N - 1 and not reports[0]["records_skipped"]


def test_sanitize_writes_avro_that_fastavro_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text(FLAT_CONFIG)
    avro = _avro_file(tmp_path / "raw.avro", _records(), codec="null")
    out = tmp_path / "out.avro"
    code = main(
        [
            "sanitize",
            "--config",
            str(tmp_path / "c.yaml"),
            "--input",
            str(avro),
            "--output",
            str(out),
            "--dead-letter",
            str(tmp_path / "dead.jsonl"),
            "--output-format",
            "avro",
        ]
    )
    assert code == 0, capsys.readouterr().err
    with out.open("rb") as handle:
        released = list(fastavro.reader(handle))
    assert len(released) == N - 1
    assert all(
        r["state"] in {"TX", "CA", "NY", "other"} and r["url"]["bucket"] >= 0 for r in released
    )
    assert b"CANARY" not in out.read_bytes()
    assert json.loads(Path(sidecar_path(str(out))).read_text())["records"] == N - 1


def test_an_empty_input_gives_a_container_of_no_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text(FLAT_CONFIG)
    empty = _avro_file(tmp_path / "raw.avro", [])
    out = tmp_path / "out.avro"
    args = ["--input", str(empty), "--output", str(out), "--output-format", "avro"]
    assert main(["sanitize", "--config", str(tmp_path / "c.yaml"), *args]) == 0
    capsys.readouterr()
    with out.open("rb") as handle:
        read = fastavro.reader(handle)
        assert list(read) == [] and read.writer_schema["name"] == "privstream.Sanitized"  # type: ignore[index]


def test_a_record_avro_cannot_hold_is_dead_lettered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text(FLAT_CONFIG)
    good = _json_lines(_records()[:2])
    surrogate = json.loads(good[0])
    surrogate["ts"] = "\udc80"  # a lone surrogate in a public field: no UTF-8 for it
    raw = tmp_path / "raw.jsonl"
    raw.write_bytes(b"\n".join([good[0], json.dumps(surrogate).encode(), good[1]]) + b"\n")
    out, dead = tmp_path / "out.avro", tmp_path / "dead.jsonl"
    args = ["--input", str(raw), "--output", str(out), "--dead-letter", str(dead)]
    code = main(
        [
            "sanitize",
            "--config",
            str(tmp_path / "c.yaml"),
            *args,
            "--output-format",
            "avro",
            "--max-dead-letter-share",
            "1",
        ]
    )
    assert code == 0, capsys.readouterr().err
    with out.open("rb") as handle:
        assert [r["ts"] for r in fastavro.reader(handle)] == [1_700_000_000, 1_700_000_001]
    letter = json.loads(dead.read_text())
    assert (letter["line"], letter["reason"]) == (2, "avro_output_unencodable")


def test_a_damaged_file_is_refused_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG)
    avro = _avro_file(tmp_path / "raw.avro", _records())
    data = avro.read_bytes()
    avro.write_bytes(data[: len(data) - 40])  # the last block cut short
    out = tmp_path / "out.jsonl"
    code = main(
        [
            "sanitize",
            "--config",
            str(tmp_path / "c.yaml"),
            "--input",
            str(avro),
            "--output",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "the Avro container file does not read past record" in err and "CANARY" not in err
    assert not out.exists() and not list(tmp_path.glob(".out.jsonl.*"))


def test_json_lines_named_avro_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG)
    raw = tmp_path / "raw.jsonl"
    raw.write_bytes(b"\n".join(_json_lines(_records()[:3])) + b"\n")
    args = ["--input", str(raw), "--output", str(tmp_path / "o"), "--input-format", "avro"]
    assert main(["sanitize", "--config", str(tmp_path / "c.yaml"), *args]) == 1
    assert "past record 0" in capsys.readouterr().err


def test_a_field_avro_cannot_name_refuses_avro_output_before_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG)  # ``device.os`` is no Avro name
    out = tmp_path / "out.avro"
    args = [
        "--input",
        str(tmp_path / "absent.avro"),
        "--output",
        str(out),
        "--output-format",
        "avro",
    ]
    assert main(["sanitize", "--config", str(tmp_path / "c.yaml"), *args]) == 2
    assert "'device.os' cannot be an Avro field name" in capsys.readouterr().err
    assert not out.exists()


def test_reads_avro_by_flag_or_magic() -> None:
    avro = io.BufferedReader(io.BytesIO(b"Obj\x01rest"))  # type: ignore[arg-type]
    jsonl = io.BufferedReader(io.BytesIO(b'{"a": 1}\n'))  # type: ignore[arg-type]
    assert reads_avro("auto", avro) and not reads_avro("auto", jsonl)
    assert reads_avro("avro", jsonl) and not reads_avro("json", avro)
    assert avro.read() == b"Obj\x01rest"  # peeked, not consumed
    assert not reads_avro("auto", io.BytesIO(b"Obj\x01"))  # no peek: JSON Lines unless told


def test_the_share_report_names_records_of_an_avro_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG)
    avro = _avro_file(tmp_path / "raw.avro", _records()[: NULL_OK + 1])
    dead = tmp_path / "dead.jsonl"
    args = ["--input", str(avro), "--output", str(tmp_path / "o"), "--dead-letter", str(dead)]
    assert main(["sanitize", "--config", str(tmp_path / "c.yaml"), *args]) == 1
    err = capsys.readouterr().err
    assert f"the first at record {NULL_OK}: field 'ok'" in err
    assert f"the raw dead-lettered records are in {dead}" in err


AGGREGATES_CONFIG = """\
privacy: {epsilon: 250}
fields:
  - {name: device_id, kind: drop}
  - {name: state, kind: categorical, domain: [TX, CA, NY, other], unknown_as: other,
     epsilon: 0.5}
aggregates:
  - {name: per_state, query: count, group_by: [{field: state, keys: [TX, CA]}], epsilon: 60}
"""


def test_aggregates_over_an_avro_file_count_its_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At epsilon 60 a count's noise has a standard error of about 1e-13: the released count
    is the true one (false-failure probability far below 1e-9)."""
    (tmp_path / "c.yaml").write_text(AGGREGATES_CONFIG)
    avro = _avro_file(tmp_path / "raw.avro", _records())
    rows_path = tmp_path / "aggregates.jsonl"
    args = ["--input", str(avro), "--output", str(tmp_path / "o.jsonl")]
    code = main(
        [
            "sanitize",
            "--config",
            str(tmp_path / "c.yaml"),
            *args,
            "--aggregates-output",
            str(rows_path),
        ]
    )
    assert code == 0, capsys.readouterr().err
    rows = {
        r["group"]["state"]: r["value"] for r in map(json.loads, rows_path.read_text().splitlines())
    }
    assert rows == {"TX": N // 4, "CA": N // 4}

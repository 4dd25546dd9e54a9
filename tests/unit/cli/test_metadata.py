"""Release metadata: ``sanitize`` writes it beside the output, ``estimate`` checks it.

Every run goes through the real entry point (``main``) on real files in
``tmp_path``; expected values come from ``explain --format json`` (the plan
as the user sees it), never from the metadata code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from privstream.cli.estimate import check_topic_read
from privstream.cli.main import main
from privstream.cli.metadata import MetadataError
from privstream.config import parse_config
from privstream.kinds import build_plan

CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 7, delta: 1.0e-5, group_size: GROUP}
fields:
  - {name: device_id, kind: drop}
  - {name: ts, kind: public}
  - {name: temp, kind: real, mechanism: laplace, bounds: [-20, 60], epsilon: 2}
  - {name: state, kind: categorical, domain: [TX, CA, NY], epsilon: 2}
  - {name: ok, kind: boolean, epsilon: 2}
  - {name: load, kind: real, bounds: [0, 10], mechanism: gaussian, epsilon: 0.5, delta: 1.0e-6}
  - {name: steps, kind: integer, bounds: [0, 9], epsilon: 0.5}
"""
N = 400


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def made(tmp_path: Path) -> dict[str, Path]:
    """A config, raw records, and their sanitized output (with its sidecar)."""
    rng = np.random.default_rng(7)
    raw = tmp_path / "raw.jsonl"
    lines = [
        json.dumps(
            {
                "device_id": f"d{i}",
                "ts": i,
                "temp": round(float(rng.uniform(-10, 50)), 3),
                "state": str(rng.choice(["TX", "CA", "NY"])),
                "ok": bool(rng.random() < 0.5),
                "load": float(rng.uniform(0, 10)),
                "steps": int(rng.integers(0, 10)),
            }
        )
        for i in range(N)
    ]
    raw.write_text("\n".join(lines) + "\n")
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.replace("GROUP", "1"))
    out = tmp_path / "out.jsonl"
    code = main(
        ["sanitize", "--config", str(config), "--input", str(raw), "--output", str(out),
         "--dead-letter", str(tmp_path / "dead.jsonl")]
    )  # fmt: skip
    assert code == 0
    return {"config": config, "raw": raw, "out": out, "tmp": tmp_path}


def _explained(capsys: pytest.CaptureFixture[str], config: Path) -> dict[str, Any]:
    code, out, _ = _run(capsys, "explain", "--config", str(config), "--format", "json")
    assert code == 0
    data: dict[str, Any] = json.loads(out)
    return data


def test_sanitize_writes_the_sidecar_with_the_release_parameters(
    made: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    sidecar = Path(f"{made['out']}.privstream.json")
    meta = json.loads(sidecar.read_text())
    explained = _explained(capsys, made["config"])
    assert meta["format"] == "privstream-release-metadata" and meta["version"] == 2
    assert meta["config_sha256"] == explained["config_sha256"]
    assert meta["record"] == {
        "epsilon": explained["record"]["epsilon"],
        "delta": explained["record"]["delta"],
        "group_size": 1,
    }
    assert meta["records"] == len(made["out"].read_text().splitlines()) == N
    released = [f for f in explained["fields"] if f["kind"] != "drop"]
    assert [f["name"] for f in meta["fields"]] == [f["name"] for f in released]
    for got, want in zip(meta["fields"], released, strict=True):
        assert got["kind"] == want["kind"] and got["mechanism"] == want["mechanism"]
        if want["mechanism"] is not None:
            assert got["params"] == want["params"]
            assert (got["epsilon"], got["delta"]) == (want["epsilon"], want["delta"])


def test_group_level_guarantee_and_stdout_output(
    tmp_path: Path, made: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "group.yaml"
    config.write_text(CONFIG.replace("GROUP", "3"))
    capsys.readouterr()
    metadata = tmp_path / "elsewhere.json"
    code, out, err = _run(
        capsys, "sanitize", "--config", str(config), "--input", str(made["raw"]),
        "--metadata", str(metadata), "--dead-letter", str(tmp_path / "d.jsonl"),
    )  # fmt: skip
    assert code == 0 and len(out.splitlines()) == N
    record = json.loads(metadata.read_text())["record"]
    explained = _explained(capsys, config)["record"]
    assert record["group_size"] == 3
    assert (record["group_epsilon"], record["group_delta"]) == (
        explained["group_epsilon"],
        explained["group_delta"],
    )
    # stdout without --metadata: no sidecar anywhere, and a note saying so
    code, out, err = _run(
        capsys, "sanitize", "--config", str(config), "--input", str(made["raw"]),
        "--dead-letter", str(tmp_path / "d2.jsonl"),
    )  # fmt: skip
    assert code == 0 and "no release metadata" in err
    assert sorted(p.name for p in tmp_path.glob("*.privstream.json")) == [
        "out.jsonl.privstream.json"
    ]


def _estimate(capsys: pytest.CaptureFixture[str], config: Path, *args: str) -> tuple[int, str, str]:
    return _run(capsys, "estimate", "--config", str(config), "--bins", "2", *args)


def test_estimate_accepts_its_own_release(
    made: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _estimate(capsys, made["config"], "--input", str(made["out"]))
    assert code == 0, err
    # n = 400: small-n warnings (load's interval is wider than its bounds; a share may fall
    # outside [0, 1]), never a refusal nor an impossible value
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert any("field load: the mean's interval" in w for w in warnings)
    assert not [w for w in warnings if "refused" in w or "impossible" in w or "grid" in w]
    assert f"{N:,} records" in out


def test_estimate_refuses_the_changed_fields_of_another_config(
    made: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    other = made["tmp"] / "other.yaml"
    # temp, state and ok change their epsilon; load and steps are released as before
    other.write_text(CONFIG.replace("GROUP", "1").replace("epsilon: 2}", "epsilon: 1.5}"))
    code, out, err = _estimate(capsys, other, "--input", str(made["out"]))
    assert code == 0, err
    for name in ("temp", "state", "ok"):
        assert f"warning: field {name} refused: epsilon 2.0 there, 1.5 here" in err
        assert f"refused: field {name}: epsilon 2.0 there" in out
    assert "\nload  real  gaussian" in out and "\nsteps  integer" in out
    assert "\ntemp  real" not in out
    # asked for by name, a changed field is refused outright: exit 2, naming it and why
    code, out, err = _estimate(capsys, other, "--input", str(made["out"]), "--field", "temp")
    assert code == 2 and out == ""
    assert "--field temp is refused: epsilon 2.0 there, 1.5 here" in err
    # --unchecked does not override it: the metadata says what the records are
    code, _, err = _estimate(
        capsys, other, "--input", str(made["out"]), "--field", "ok", "--unchecked"
    )
    assert code == 2 and "--field ok is refused" in err


def test_version_1_metadata_is_matched_by_the_config_hash(
    made: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    sidecar = Path(f"{made['out']}.privstream.json")
    meta = json.loads(sidecar.read_text())
    meta["version"] = 1
    for entry in meta["fields"]:
        del entry["release_id"]
    sidecar.write_text(json.dumps(meta))
    code, _, err = _estimate(capsys, made["config"], "--input", str(made["out"]))
    assert code == 0, err
    other = made["tmp"] / "other.yaml"
    other.write_text(CONFIG.replace("GROUP", "1").replace("epsilon: 2}", "epsilon: 1.5}"))
    ours = _explained(capsys, made["config"])["config_sha256"]
    theirs = _explained(capsys, other)["config_sha256"]
    code, out, err = _estimate(capsys, other, "--input", str(made["out"]))
    assert code == 2 and out == ""
    assert f"made with config sha256 {ours}" in err and f"--config has {theirs}" in err


def test_estimate_refuses_raw_input_unless_unchecked(
    made: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _estimate(capsys, made["config"], "--input", str(made["raw"]))
    assert code == 2 and out == ""
    assert f"no release metadata at {made['raw']}.privstream.json" in err
    assert "--unchecked" in err
    code, out, err = _estimate(capsys, made["config"], "--input", str(made["raw"]), "--unchecked")
    assert code == 0
    assert "reading it unchecked" in err
    # raw temperatures (3 decimals) are off the release grid of 0.125 steps: impossible
    assert "field temp:" in err and "off the laplace output grid" in err


def test_estimate_warns_of_impossible_values(
    made: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = made["out"].read_text().splitlines()
    bad = [
        {**json.loads(lines[0]), "ok": 1},  # not a bool
        {**json.loads(lines[1]), "state": "ZZ"},  # outside the domain
        {**json.loads(lines[2]), "temp": 0.1},  # off the grid
    ]
    made["out"].write_text("\n".join(lines + [json.dumps(b) for b in bad]) + "\n")
    code, _, err = _estimate(capsys, made["config"], "--input", str(made["out"]))
    assert code == 0
    # the impossible values' warnings (small-n ones may come beside them: the noise decides)
    warnings = [w for w in err.splitlines() if "impossible" in w or "off the" in w]
    assert len(warnings) == 3, err
    assert any("field ok: 1 values impossible" in w for w in warnings)
    assert any("field state: 1 values impossible" in w for w in warnings)
    assert any(f"field temp: 1 of {N + 3:,} values are off" in w for w in warnings)


def test_estimate_refuses_a_field_whose_sidecar_has_other_parameters(
    made: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    sidecar = Path(f"{made['out']}.privstream.json")
    meta = json.loads(sidecar.read_text())
    scale = meta["fields"][1]["params"]["scale"]
    meta["fields"][1]["params"]["scale"] *= 2  # temp: same release id, other noise
    sidecar.write_text(json.dumps(meta))
    code, _, err = _estimate(capsys, made["config"], "--input", str(made["out"]), "--field", "temp")
    assert code == 2 and "--field temp is refused: params" in err and f"{scale * 2!r}" in err
    sidecar.write_text("{not json")
    code, _, err = _estimate(capsys, made["config"], "--input", str(made["out"]))
    assert code == 2 and "unreadable" in err
    moved = made["tmp"] / "meta.json"
    moved.write_text(json.dumps(meta))  # the altered parameters, elsewhere
    sidecar.unlink()
    code, _, err = _estimate(
        capsys, made["config"], "--input", str(made["out"]), "--release-metadata", str(moved)
    )
    assert code == 0 and "warning: field temp refused: params" in err  # the one read
    code, _, err = _estimate(
        capsys, made["config"], "--input", str(made["out"]), "--metadata", str(moved)
    )
    assert code == 0 and "warning: field temp refused: params" in err  # the older spelling


def test_topic_checks() -> None:
    plan = build_plan(parse_config(__import__("yaml").safe_load(CONFIG.replace("GROUP", "1"))))
    source = {"topic": "t", "records_read": 0, "records_without_config_header": 0,
              "other_config": "ab" * 32}  # fmt: skip
    with pytest.raises(MetadataError, match=f"all 5 records carry another config.*{'ab' * 32}"):
        check_topic_read(source, {"config_mismatch": 5}, plan, unchecked=False)
    # some of this config beside others (a config change): the others are skipped, no refusal
    check_topic_read({**source, "records_read": 3}, {"config_mismatch": 5}, plan, unchecked=False)
    no_headers = {**source, "records_read": 4, "records_without_config_header": 4}
    with pytest.raises(MetadataError, match="4 records have no privstream-config-sha256"):
        check_topic_read(no_headers, {}, plan, unchecked=False)
    check_topic_read(no_headers, {}, plan, unchecked=True)


def test_estimate_on_a_topic_refuses_another_config_and_headerless_records(
    made: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The topic path through ``main``: the reader (Kafka) replaced by a stub."""
    from privstream.estimate import source
    from privstream.estimate.source import TopicRead

    lines = made["out"].read_bytes().splitlines()

    def stub(kind: str) -> Any:
        def read(kafka: Any, topic: str, sink: Any, *, skip: Any, **_: Any) -> TopicRead:
            read = TopicRead(topic, partitions=1, expected=len(lines))
            for line in lines:
                if kind == "other":
                    read.config_mismatch += 1
                    read.other_config = "cd" * 32
                    skip("config_mismatch")
                else:
                    read.records += 1
                    read.without_config_header += kind == "bare"
                    sink(line)
            return read

        return read

    args = ["--topic", "clean", "--field", "ok"]
    monkeypatch.setattr(source, "run_topic_read", stub("ours"))
    code, out, err = _estimate(capsys, made["config"], *args)
    assert code == 0 and f"{N:,} records from topic clean" in out, err
    monkeypatch.setattr(source, "run_topic_read", stub("other"))
    code, out, err = _estimate(capsys, made["config"], *args)
    assert code == 2 and out == "" and f"all {N} records carry another config" in err
    assert "cd" * 32 in err
    monkeypatch.setattr(source, "run_topic_read", stub("bare"))
    code, out, err = _estimate(capsys, made["config"], *args)
    assert code == 2 and f"{N} records have no privstream-config-sha256 header" in err
    code, out, err = _estimate(capsys, made["config"], *args, "--unchecked")
    assert code == 0 and "read unchecked (--unchecked)" in err


def test_sanitize_refuses_a_metadata_path_that_is_a_data_file_and_keeps_the_old_pair(
    made: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    raw, out, tmp = made["raw"], made["out"], made["tmp"]
    before = raw.read_bytes()
    code, _, err = _run(
        capsys, "sanitize", "--config", str(made["config"]), "--input", str(raw),
        "--output", str(tmp / "o2.jsonl"), "--metadata", str(raw),
        "--dead-letter", str(tmp / "d3.jsonl"),
    )  # fmt: skip
    assert code == 2 and "--metadata" in err and "is the --input file" in err
    assert raw.read_bytes() == before
    # a failing run (the input does not exist) leaves the earlier output and its metadata
    sidecar = Path(f"{out}.privstream.json")
    pair = out.read_bytes(), sidecar.read_bytes()
    code, _, err = _run(
        capsys, "sanitize", "--config", str(made["config"]), "--input", str(tmp / "missing"),
        "--output", str(out), "--dead-letter", str(tmp / "d4.jsonl"), "--overwrite",
    )  # fmt: skip
    assert code == 1 and (out.read_bytes(), sidecar.read_bytes()) == pair
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith(".")) == []  # no temp

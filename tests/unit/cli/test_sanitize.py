"""``privstream sanitize`` in file mode, through the real entry point."""

from __future__ import annotations

import base64
import gc
import io
import json
import os
import re
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml
from privstream.cli import sanitize
from privstream.cli.main import main
from privstream.config import load_config
from privstream.errors import Rejected
from privstream.kinds import build_plan
from privstream.pipeline.parse import parse_row
from privstream.pipeline.plan import unkeyed

CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 2, delta: 1e-6}
fields:
  - {name: device_id, kind: drop}
  - {name: ts, kind: public}
  - {name: salary, kind: real, bounds: [1504, 4500], mechanism: laplace, epsilon: 1}
  - {name: state, kind: categorical, domain: [TX, CA, NY], epsilon: 0.5}
  - {name: ok, kind: boolean, epsilon: 0.5}
"""
RELEASED = ["ts", "salary", "state", "ok"]


def rec(**kw: object) -> str:
    base: dict[str, object] = {
        "device_id": "d-1",
        "ts": 100,
        "salary": 2000,
        "state": "TX",
        "ok": True,
    }
    base.update(kw)
    return json.dumps(base)


LINES = [
    rec(),  # 1 good
    '{"device_id": "d-2", "ts": 1, "salary": ',  # 2 malformed JSON
    rec(ts=3, extra="EXTRA-CANARY"),  # 3 good, unknown extra field
    json.dumps({"device_id": "d-4", "ts": 4, "state": "CA", "ok": False}),  # 4 missing salary
    "",  # 5 blank
    rec(ts=6, salary="lots"),  # 6 wrong type
    rec(ts=7, state="ZZ"),  # 7 unknown category
    rec(ts=8, salary=1e12),  # 8 good (clamped)
    "   ",  # 9 whitespace only
    rec(ts=10, ok="yes"),  # 10 wrong type
]
EXPECTED_DEAD = {
    2: "invalid_json",
    4: "missing_field",
    6: "wrong_type",
    7: "unknown_category",
    10: "wrong_type",
}
EXPECTED_TS = [100, 3, 8]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    data = tmp_path / "in.jsonl"
    data.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return {
        "config": config,
        "input": data,
        "output": tmp_path / "out.jsonl",
        "dead": tmp_path / "dead.jsonl",
    }


def run(files: dict[str, Path], *extra: str) -> int:
    """``sanitize`` on ``files``; LINES dead-letter 5 of 8 records, so the share limit is
    off (1) unless ``extra`` sets one: these tests are about what is written."""
    return main(
        [
            "sanitize",
            "--config",
            str(files["config"]),
            "--input",
            str(files["input"]),
            "--output",
            str(files["output"]),
            "--dead-letter",
            str(files["dead"]),
            *(extra or ("--max-dead-letter-share", "1")),
        ]
    )


def test_sanitize_file_mode(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert run(files) == 0
    out_lines = files["output"].read_bytes().splitlines()
    assert len(out_lines) == len(EXPECTED_TS)
    for raw, ts in zip(out_lines, EXPECTED_TS, strict=True):
        obj = json.loads(raw)
        assert list(obj) == RELEASED
        assert obj["ts"] == ts
        assert isinstance(obj["salary"], float)
        assert obj["state"] in ("TX", "CA", "NY")
        assert isinstance(obj["ok"], bool)
    assert b"CANARY" not in files["output"].read_bytes()
    assert b"device_id" not in files["output"].read_bytes()

    dead = [json.loads(line) for line in files["dead"].read_text().splitlines()]
    assert {d["line"]: d["reason"] for d in dead} == EXPECTED_DEAD
    for d in dead:
        assert d["raw"] == LINES[d["line"] - 1]
        assert isinstance(d["detail"], str)

    err = capsys.readouterr().err
    summary = [line for line in err.splitlines() if line.startswith("privstream sanitize:")]
    assert len(summary) == 1
    line = summary[0]
    assert "8 records in" in line
    assert "3 sanitized" in line
    assert "5 dead-lettered" in line
    assert "invalid_json 1" in line
    assert "missing_field 1" in line
    assert "unknown_category 1" in line
    assert "wrong_type 2" in line
    assert "2 blank lines skipped" in line
    assert str(files["dead"]) in line


@pytest.mark.parametrize("block", [16, 97, 1 << 20])  # smaller than a line, odd, all at once
@pytest.mark.parametrize("end", ["\n", "\r\n"])
@pytest.mark.parametrize("final_newline", [True, False])
def test_block_reads_split_lines_like_line_iteration(
    files: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    block: int,
    end: str,
    final_newline: bool,
) -> None:
    """Lines cut by block boundaries, Windows line ends and a missing last newline change
    nothing: the same records, in order, the same dead letters with their line numbers."""
    monkeypatch.setattr(sanitize, "BLOCK_BYTES", block)
    files["input"].write_bytes((end.join(LINES) + (end if final_newline else "")).encode())
    assert run(files) == 0
    released = [json.loads(raw)["ts"] for raw in files["output"].read_bytes().splitlines()]
    assert released == EXPECTED_TS
    dead = [json.loads(line) for line in files["dead"].read_text().splitlines()]
    assert {d["line"]: d["reason"] for d in dead} == EXPECTED_DEAD
    assert all(d["raw"] == LINES[d["line"] - 1] for d in dead)  # no "\r" left, none cut
    assert "2 blank lines skipped" in capsys.readouterr().err


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r\r\n"])
def test_dead_letter_details_are_those_of_the_line_without_its_line_end(
    files: dict[str, Path], end: str
) -> None:
    """Blocks reach ``process_batch`` with their line ends (JSON whitespace), but a detail
    that names a position is the line's own: the truncated record ends at its last byte."""
    files["input"].write_bytes((end.join(LINES) + end).encode())
    assert run(files) == 0
    dead = {d["line"]: d for d in map(json.loads, files["dead"].read_text().splitlines())}
    assert dead[2]["detail"] == f"not valid JSON at char {len(LINES[1])}"
    plan = unkeyed(build_plan(load_config(str(files["config"]))))
    for entry in dead.values():
        with pytest.raises(Rejected) as verdict:
            parse_row(plan, entry["raw"].encode())
        assert (entry["reason"], entry["detail"]) == (verdict.value.reason, verdict.value.detail)


def test_nesting_at_the_recursion_limit_keeps_the_batch_verdict(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A line nested right at the stdlib decoder's recursion limit fails inside
    ``process_batch`` (a deeper stack) yet may decode from a shallower one: its verdict
    is the batch's ``invalid_json``, as before lines kept their line ends; the run
    neither stops (a valid record there) nor renames the line (``not_object``)."""
    # every nesting up to past the limit (Python 3.11: frames and nesting share it), so
    # whatever frames the call paths add, lines fall in the window between the two stacks;
    # line 2n - 3 an array nested n deep, line 2n - 2 a releasable record as deep (its pad)
    nestings = range(2, sys.getrecursionlimit() + 40)
    pad = rec()[:-1] + ', "pad": '
    lines = [
        line
        for n in nestings
        for line in ("[" * n + "]" * n, pad + "[" * (n - 1) + "]" * (n - 1) + "}")
    ]
    files["input"].write_bytes(("\n".join(lines) + "\n").encode())
    assert run(files) == 0, capsys.readouterr().err
    dead = [json.loads(line) for line in files["dead"].read_text().splitlines()]
    # the verdict depends on the nesting alone, which never decreases along the file:
    # shallow records released, shallow arrays not objects, from the first line too deep
    # on every line invalid_json (a recursion error names no position)
    first = next(e["line"] for e in dead if e["reason"] == "invalid_json")
    assert first % 2 == 1  # both kinds fail from the same nesting on
    assert [(e["line"], e["reason"]) for e in dead if e["line"] < first] == [
        (number, "not_object") for number in range(1, first, 2)
    ]
    assert [(e["line"], e["reason"], e["detail"]) for e in dead if e["line"] >= first] == [
        (number, "invalid_json", "not valid JSON") for number in range(first, len(lines) + 1)
    ]
    assert len(files["output"].read_bytes().splitlines()) == first // 2


def test_whitespace_lines_are_blank_not_dead_letters(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every line ``bytes.strip`` empties is skipped as blank (form feed and vertical tab
    too, which JSON does not count as whitespace), wherever it falls in a block."""
    blanks = ["", " \t", "\x0c", "\x0b ", "\r"]
    files["input"].write_bytes("\n".join([*blanks, rec(), *blanks, rec(ts=2)]).encode())
    assert run(files) == 0
    assert not files["dead"].exists()
    assert [json.loads(raw)["ts"] for raw in files["output"].read_bytes().splitlines()] == [100, 2]
    err = capsys.readouterr().err
    assert "2 records in, 2 sanitized, 0 dead-lettered; 10 blank lines skipped" in err


def test_clean_input_creates_no_dead_letter_file(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["input"].write_text(rec() + "\n" + rec(ts=2) + "\r\n", encoding="utf-8")
    assert run(files) == 0
    assert not files["dead"].exists()
    assert len(files["output"].read_bytes().splitlines()) == 2
    assert re.search(r"2 records in, 2 sanitized, 0 dead-lettered", capsys.readouterr().err)


def test_invalid_utf8_line_is_dead_lettered_as_base64(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    bad = b'{"ts": 1, "salary": "\xff"}'
    files["input"].write_bytes(rec().encode() + b"\n" + bad + b"\n")
    assert run(files) == 0
    (entry,) = [json.loads(line) for line in files["dead"].read_text().splitlines()]
    assert entry["line"] == 2
    assert entry["reason"] == "invalid_utf8"
    assert "raw" not in entry
    assert base64.b64decode(entry["raw_base64"]) == bad
    assert "1 sanitized" in capsys.readouterr().err


def test_empty_input(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    files["input"].write_bytes(b"")
    assert run(files) == 0
    assert files["output"].read_bytes() == b""
    assert "0 records in, 0 sanitized, 0 dead-lettered" in capsys.readouterr().err


def test_stdin_to_stdout(
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stdin = io.TextIOWrapper(io.BytesIO((rec() + "\n" + "{bad\n").encode()), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    args = ["sanitize", "--config", str(files["config"]), "--dead-letter", str(files["dead"])]
    code = main([*args, "--max-dead-letter-share", "0.5"])  # 1 of 2
    assert code == 0
    captured = capsys.readouterr()
    out_lines = captured.out.splitlines()
    assert len(out_lines) == 1
    assert list(json.loads(out_lines[0])) == RELEASED
    assert "2 records in, 1 sanitized, 1 dead-lettered" in captured.err
    assert json.loads(files["dead"].read_text())["line"] == 2


def test_missing_input_file_is_a_runtime_failure(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["input"].unlink()
    assert run(files) == 1
    err = capsys.readouterr().err
    assert err.startswith("privstream: ")
    assert str(files["input"]) in err


def test_unwritable_output_closes_the_input(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["output"] = files["output"].parent / "no-such-dir" / "out.jsonl"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = run(files)
        gc.collect()
    assert code == 1
    assert "No such file or directory" in capsys.readouterr().err
    leaks = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == []


def test_bad_config_exits_2_with_one_line_per_problem(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["config"].write_text(
        CONFIG.replace("epsilon: 1}", "epsilon: -1}")
        .replace("[TX, CA, NY]", "[TX, TX]")
        .replace("dead_letter_topic: dlq", "dead_letter_topic: dlq, colour: red"),
        encoding="utf-8",
    )
    with pytest.raises(SystemExit) as info:
        run(files)
    assert info.value.code == 2
    err_lines = capsys.readouterr().err.splitlines()
    assert len(err_lines) == 3
    assert all(line.startswith("privstream: config error: ") for line in err_lines)
    heads = sorted(
        line.removeprefix("privstream: config error: ").split(": ")[0] for line in err_lines
    )
    assert heads == ["fields[2] (salary).epsilon", "fields[3] (state).domain", "kafka.colour"]
    assert not files["output"].exists()
    assert not files["dead"].exists()


def test_missing_config_file_exits_2(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["config"].unlink()
    with pytest.raises(SystemExit) as info:
        run(files)
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("privstream: config error: config ")
    assert "cannot read it" in line


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["sanitize"])
    assert info.value.code == 2
    assert "--config" in capsys.readouterr().err


# --- the dead-letter file holds raw records (issue 13) ----------------------------------


def test_dead_letter_file_is_private(files: dict[str, Path]) -> None:
    old = os.umask(0)  # even a permissive umask gives 0600
    try:
        assert run(files) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(files["dead"].stat().st_mode) == 0o600


def _refused(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], needle: str, *extra: str
) -> None:
    assert run(files, *extra) == 2
    err = capsys.readouterr().err
    assert needle in err, err
    assert "CANARY" not in err


def test_existing_dead_letter_file_is_kept_without_overwrite(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["dead"].write_text("earlier raw records\n")
    _refused(files, capsys, "the path exists")
    assert files["dead"].read_text() == "earlier raw records\n"
    assert not files["output"].exists()  # refused before any output


@pytest.mark.parametrize(
    ("link", "refusal"),
    [
        ("symlink", "is the --output file"),
        ("hardlink", "is the --output file"),
        ("dangling", "the path exists"),
    ],
)
def test_dead_letter_through_a_link_is_refused(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], link: str, refusal: str
) -> None:
    target = files["output"] if link != "dangling" else files["output"].with_suffix(".none")
    if link != "dangling":
        files["output"].write_text("sanitized\n")
    if link == "hardlink":
        os.link(target, files["dead"])
    else:
        files["dead"].symlink_to(target)
    _refused(files, capsys, refusal)
    if link != "dangling":
        _refused(files, capsys, refusal, "--overwrite")  # never the output, overwrite or not
        assert files["output"].read_text() == "sanitized\n"
        return
    # --overwrite replaces the link itself: its target is never created
    assert run(files, "--overwrite", "--max-dead-letter-share", "1") == 0
    assert not target.exists()
    assert not files["dead"].is_symlink()
    assert stat.S_IMODE(files["dead"].stat().st_mode) == 0o600


def test_dead_letter_equal_to_output_is_refused(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    spelled = files["output"].parent / "." / files["output"].name
    files["dead"] = spelled
    _refused(files, capsys, "is the --output file")
    assert not files["output"].exists()


def test_sanitize_start_up_leaves_out_what_only_other_commands_need(
    files: dict[str, Path],
) -> None:
    """Start-up is part of file mode's cost: no event loop, no estimate or audit modules."""
    code = (
        "import sys; from privstream.cli.main import main; code = main(sys.argv[1:]); "
        "loaded = [m for m in ('asyncio', 'privstream.cli.estimate', 'privstream.cli.audit') "
        "if m in sys.modules]; assert not loaded, loaded; sys.exit(code)"
    )
    args = ["sanitize", "--config", str(files["config"]), "--input", str(files["input"])]
    args += ["--output", str(files["output"]), "--dead-letter", str(files["dead"])]
    args += ["--max-dead-letter-share", "1"]
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert len(files["output"].read_bytes().splitlines()) == len(EXPECTED_TS)


def test_line_iterables_are_cut_by_bytes_as_well_as_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk ends at CHUNK_LINES lines or once it holds BLOCK_BYTES: long lines, short chunks."""
    monkeypatch.setattr(sanitize, "BLOCK_BYTES", 250)
    monkeypatch.setattr(sanitize, "CHUNK_LINES", 4)
    lines = [b"x" * 99 + b"\n"] * 7 + [b"y\n"] * 6
    chunks = list(sanitize._line_chunks(lines))
    assert [(first, len(chunk)) for first, chunk in chunks] == [(1, 3), (4, 3), (7, 4), (11, 3)]
    assert [line for _, chunk in chunks for line in chunk] == [line[:-1] for line in lines]


def test_a_deeply_nested_public_value_is_a_dead_letter_not_a_crash(
    files: dict[str, Path],
) -> None:
    config = yaml.safe_load(files["config"].read_text())
    config["fields"].append({"name": "meta", "kind": "public", "allow_nested": True})
    files["config"].write_text(yaml.safe_dump(config))
    deep = json.loads("[" * 600 + "]" * 600)  # the stdlib decodes it: a record, not an error
    metas = [{"a": [1]}, deep, {"b": {"c": None}}]
    files["input"].write_text("".join(rec(ts=i, meta=m) + "\n" for i, m in enumerate(metas)))
    assert run(files) == 0
    dead = [json.loads(line) for line in files["dead"].read_text().splitlines()]
    assert [(d["line"], d["reason"]) for d in dead] == [(2, "nested_public")]
    released = [json.loads(line) for line in files["output"].read_text().splitlines()]
    assert [r["meta"] for r in released] == [metas[0], metas[2]]

"""No data loss in file mode (issue 29): the paths ``sanitize`` refuses, files that appear
whole or not at all, and the dead-letter share that turns a run into exit 1.

Real files in ``tmp_path`` through the real entry point (``main``). On the code before
issue 29 each attack here lost data or exited 0: ``--output`` equal to the input
emptied it, an existing output was overwritten, a crash left half an output, and a
run that dead-lettered 95% of its records exited 0.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from privstream.cli import sanitize
from privstream.cli.main import main
from privstream.pipeline.batch import process_block

CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 2, delta: 1e-6}
fields:
  - {name: ts, kind: public}
  - {name: salary, kind: real, bounds: [0, 100], mechanism: laplace, epsilon: 1}
"""


def good(ts: int) -> str:
    return json.dumps({"ts": ts, "salary": 50})


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "config.yaml").write_text(CONFIG)
    raw = tmp_path / "raw.jsonl"
    raw.write_text("".join(good(i) + "\n" for i in range(10)))
    return {
        "config": tmp_path / "config.yaml",
        "input": raw,
        "output": tmp_path / "out.jsonl",
        "dead": tmp_path / "dead.jsonl",
    }


def run(files: dict[str, Path], *extra: str) -> int:
    return main(
        ["sanitize", "--config", str(files["config"]), "--input", str(files["input"]),
         "--output", str(files["output"]), "--dead-letter", str(files["dead"]), *extra]
    )  # fmt: skip


def leftovers(directory: Path) -> list[str]:
    """Temporary files a run left behind."""
    return sorted(p.name for p in directory.iterdir() if ".privstream-" in p.name)


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".privstream.json")


# --- an output or dead-letter file that is the input ------------------------------------

#: ways to name the input as another path: (name, make the other path from the input)
ALIASES: list[tuple[str, Callable[[Path, Path], None]]] = [
    ("same path", lambda raw, other: None),
    ("spelled differently", lambda raw, other: None),
    ("hard link", lambda raw, other: os.link(raw, other)),
    ("symlink", lambda raw, other: other.symlink_to(raw)),
]


def _alias(files: dict[str, Path], name: str, make: Callable[[Path, Path], None]) -> Path:
    raw = files["input"]
    if name == "same path":
        return raw
    if name == "spelled differently":
        return raw.parent / "." / raw.name
    other = raw.parent / "alias.jsonl"
    make(raw, other)
    return other


@pytest.mark.parametrize("overwrite", [(), ("--overwrite",)], ids=["", "overwrite"])
@pytest.mark.parametrize(("name", "make"), ALIASES, ids=[a[0] for a in ALIASES])
def test_an_output_that_is_the_input_is_refused(
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    name: str,
    make: Callable[[Path, Path], None],
    overwrite: tuple[str, ...],
) -> None:
    before = files["input"].read_bytes()
    files["output"] = _alias(files, name, make)
    assert run(files, *overwrite) == 2
    err = capsys.readouterr().err
    assert f"--output {files['output']} is the --input file {files['input']}" in err
    assert "name a new --output file" in err
    assert files["input"].read_bytes() == before  # the raw records survive
    assert not files["dead"].exists() and leftovers(files["input"].parent) == []


def test_an_input_that_is_a_link_to_the_output_is_refused(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The other way round: --input names a symlink, --output the file it points to."""
    before = files["input"].read_bytes()
    link = files["input"].parent / "link.jsonl"
    link.symlink_to(files["input"])
    files["output"], files["input"] = files["input"], link
    assert run(files, "--overwrite") == 2
    assert "is the --input file" in capsys.readouterr().err
    assert files["output"].read_bytes() == before


@pytest.mark.parametrize("overwrite", [(), ("--overwrite",)], ids=["", "overwrite"])
@pytest.mark.parametrize(("name", "make"), ALIASES, ids=[a[0] for a in ALIASES])
def test_a_dead_letter_file_that_is_the_input_is_refused(
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    name: str,
    make: Callable[[Path, Path], None],
    overwrite: tuple[str, ...],
) -> None:
    files["input"].write_text(good(1) + "\n{broken\n")  # a dead letter to write
    before = files["input"].read_bytes()
    files["dead"] = _alias(files, name, make)
    assert run(files, *overwrite) == 2  # refused before the share could matter
    err = capsys.readouterr().err
    assert f"--dead-letter {files['dead']} is the --input file {files['input']}" in err
    assert "name a new --dead-letter file" in err
    assert files["input"].read_bytes() == before
    assert not files["output"].exists() and leftovers(files["input"].parent) == []


def test_standard_output_redirected_onto_standard_input_is_refused(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``privstream sanitize < f >> f``: the shell appends the release to its own input."""
    before = files["input"].read_bytes()
    with files["input"].open() as stdin, files["input"].open("a") as stdout:
        monkeypatch.setattr(sys, "stdin", stdin)
        monkeypatch.setattr(sys, "stdout", stdout)
        code = main(["sanitize", "--config", str(files["config"]), "--dead-letter",
                     str(files["dead"])])  # fmt: skip
        monkeypatch.undo()
    assert code == 2
    assert "--output stdout is the --input file stdin" in capsys.readouterr().err
    assert files["input"].read_bytes() == before


# --- an existing output: an earlier release ---------------------------------------------


def test_an_existing_output_is_refused_without_overwrite(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(files) == 0
    first, first_meta = files["output"].read_bytes(), sidecar(files["output"]).read_bytes()
    capsys.readouterr()
    assert run(files) == 2
    err = capsys.readouterr().err
    assert f"--output {files['output']} exists" in err
    assert "a second release whose epsilon adds to the first's" in err
    assert "pass --overwrite if the earlier output was never shared" in err
    assert files["output"].read_bytes() == first  # the first release, as it was
    assert sidecar(files["output"]).read_bytes() == first_meta
    assert leftovers(files["output"].parent) == []


def test_overwrite_replaces_the_output_and_its_metadata(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["output"].write_text("an earlier release\n")
    sidecar(files["output"]).write_text("{}\n")
    assert run(files, "--overwrite") == 0
    released = [json.loads(line) for line in files["output"].read_text().splitlines()]
    assert [r["ts"] for r in released] == list(range(10))
    assert json.loads(sidecar(files["output"]).read_text())["records"] == 10
    assert leftovers(files["output"].parent) == []


def test_overwrite_replaces_a_symlinked_output_not_its_target(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = files["output"].parent / "elsewhere.txt"
    elsewhere.write_text("someone else's file\n")
    files["output"].symlink_to(elsewhere)
    assert run(files) == 2  # a link is an existing output too
    assert run(files, "--overwrite") == 0
    assert not files["output"].is_symlink()
    assert len(files["output"].read_text().splitlines()) == 10
    assert elsewhere.read_text() == "someone else's file\n"


def test_an_existing_dead_letter_file_is_replaced_only_with_overwrite(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["input"].write_text(good(1) + "\n{broken\n")
    files["dead"].write_text("earlier dead letters\n")
    assert run(files, "--max-dead-letter-share", "1") == 2
    assert "the path exists" in capsys.readouterr().err
    assert files["dead"].read_text() == "earlier dead letters\n"
    assert run(files, "--overwrite", "--max-dead-letter-share", "1") == 0
    (entry,) = map(json.loads, files["dead"].read_text().splitlines())
    assert (entry["line"], entry["raw"]) == (2, "{broken")
    assert oct(files["dead"].stat().st_mode & 0o777) == oct(0o600)


def test_a_directory_is_no_output(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["output"].mkdir()
    assert run(files, "--overwrite") == 2
    assert f"--output {files['output']} is a directory: name a file" in capsys.readouterr().err
    assert list(files["output"].iterdir()) == [] and leftovers(files["input"].parent) == []


def test_a_rename_that_fails_leaves_no_temporary_file(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rename at the end fails (exit 1, naming the output): the written temporary file
    goes with it, and nothing is in the output's place."""

    def refuse(source: str, target: str) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), source)

    monkeypatch.setattr(os, "replace", refuse)
    assert run(files) == 1
    assert f"privstream: {files['output']}: Permission denied" in capsys.readouterr().err
    assert not files["output"].exists() and leftovers(files["input"].parent) == []


# --- a crash mid-write leaves no half-written release -----------------------------------

CRASH = b'{"ts": "CRASH"}'


def _crash_on_marked_record(
    monkeypatch: pytest.MonkeyPatch, directory: Path, error: BaseException
) -> list[int]:
    """``process_block`` raises ``error`` on the chunk holding CRASH, after earlier chunks
    were written; returns the bytes of output on disk (wherever written) when it raised."""
    sizes: list[int] = []

    def block(plan: object, lines: list[bytes], source: object, reads: object = ()) -> object:
        if any(line.startswith(CRASH) for line in lines):
            written = [p for p in directory.iterdir() if "out.jsonl" in p.name]
            sizes.append(sum(p.stat().st_size for p in written if not p.is_symlink()))
            raise error
        return process_block(plan, lines, source, reads)  # type: ignore[arg-type]

    monkeypatch.setattr(sanitize, "process_block", block)
    monkeypatch.setattr(sanitize, "BLOCK_BYTES", 1024)  # 40 records a chunk
    return sizes


def _crashing_input(files: dict[str, Path]) -> None:
    lines = [good(i) for i in range(1000)] + ["{broken", CRASH.decode(), good(99)]
    files["input"].write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("earlier", [False, True], ids=["new output", "over an earlier one"])
def test_a_writer_that_raises_mid_run_leaves_no_half_written_release(
    files: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    earlier: bool,
) -> None:
    if earlier:
        files["output"].write_text("the earlier release\n")
        sidecar(files["output"]).write_text("its metadata\n")
    _crashing_input(files)
    sizes = _crash_on_marked_record(monkeypatch, files["input"].parent, RuntimeError("bug"))
    with pytest.raises(RuntimeError, match="bug"):
        run(files, *(("--overwrite",) if earlier else ()))
    # it crashed mid-write: past the 8 KiB buffer, records were on disk
    assert sizes[0] > (len("the earlier release\n") + len("its metadata\n")) * earlier
    assert leftovers(files["input"].parent) == []
    assert not files["dead"].exists()  # the dead letter before the crash is gone with it
    if earlier:
        assert files["output"].read_text() == "the earlier release\n"
        assert sidecar(files["output"]).read_text() == "its metadata\n"
    else:
        assert not files["output"].exists() and not sidecar(files["output"]).exists()


def test_a_full_disk_mid_run_exits_1_and_cleans_up(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _crashing_input(files)
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(files["output"]))
    sizes = _crash_on_marked_record(monkeypatch, files["input"].parent, full)
    assert run(files) == 1
    assert sizes[0] > 0
    assert "No space left on device" in capsys.readouterr().err
    assert leftovers(files["input"].parent) == []
    assert not files["output"].exists() and not files["dead"].exists()


def test_sigterm_mid_run_removes_the_temporary_output(files: dict[str, Path]) -> None:
    """A real process stopped by SIGTERM (a service manager, ``kill``) while it writes: exit
    143, no traceback, no temporary file, no output. The input comes from a pipe that stays
    open, so the run is mid-way for as long as the test needs."""
    command = [sys.executable, "-m", "privstream.cli.main", "sanitize", "--config",
               str(files["config"]), "--output", str(files["output"]), "--dead-letter",
               str(files["dead"])]  # fmt: skip
    with subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdin is not None and process.stderr is not None
        process.stdin.write(files["input"].read_bytes() + b"{broken\n")
        process.stdin.flush()
        deadline = time.monotonic() + 60
        # polling, not a guess: the temporary output exists once the handler is installed
        while not leftovers(files["output"].parent):
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "no temporary output after 60 s"
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 128 + signal.SIGTERM
        err = process.stderr.read().decode()
        process.stdin.close()
    assert "Traceback" not in err, err
    assert leftovers(files["output"].parent) == []
    assert not files["output"].exists() and not files["dead"].exists()


# --- the dead-letter share --------------------------------------------------------------


def _mostly_dead(files: dict[str, Path]) -> None:
    """19 of 20 records dead-lettered (a missing field, a null, a string), 3 blank lines."""
    lines = [good(0), "", "  "]
    lines += [json.dumps({"ts": i}) for i in range(1, 11)]  # missing_field
    lines += [json.dumps({"ts": i, "salary": None}) for i in range(11, 17)]  # null
    lines += [json.dumps({"ts": i, "salary": "high"}) for i in range(17, 20)] + [""]
    files["input"].write_text("\n".join(lines) + "\n")


def test_a_run_that_dead_letters_most_records_exits_1_with_a_summary_by_reason(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _mostly_dead(files)
    assert run(files) == 1  # the default limit, 1%
    err = capsys.readouterr().err.splitlines()
    report = err[err.index(next(e for e in err if "were dead-lettered" in e)) :]
    assert report[:4] == [
        "privstream: 19 of 20 records (95.0%) were dead-lettered, more than "
        "--max-dead-letter-share 0.01 (1.0%):",
        "privstream:   missing_field 10, the first at line 4: field 'salary': missing",
        "privstream:   wrong_type 9, the first at line 14: field 'salary': expected a number, "
        "got null",
        f"privstream: the sanitized records (1) are in {files['output']} all the same, a "
        "release like any other: never also release another run over the same records",
    ]
    assert f"the raw dead-lettered lines are in {files['dead']}" in report[4]
    # the output is written all the same, with its metadata
    assert [json.loads(r)["ts"] for r in files["output"].read_text().splitlines()] == [0]
    assert json.loads(sidecar(files["output"]).read_text())["records"] == 1
    assert len(files["dead"].read_text().splitlines()) == 19
    assert leftovers(files["input"].parent) == []


def test_a_dotted_name_reads_the_nested_value(files: dict[str, Path]) -> None:
    """``user.salary`` is the key ``salary`` of the object under ``user`` (issue 32: it
    dead-lettered every record before); the output keeps the nesting, nothing else of
    ``user``, and a record without the object is dead-lettered with the path."""
    files["config"].write_text(CONFIG.replace("name: salary", "name: user.salary"))
    lines = [json.dumps({"ts": i, "user": {"salary": 5, "name": "x"}}) for i in range(199)]
    files["input"].write_text("\n".join([*lines, json.dumps({"ts": 199})]) + "\n")
    assert run(files) == 0  # 1 of 200 dead-lettered: within the default share
    released = [json.loads(line) for line in files["output"].read_text().splitlines()]
    assert len(released) == 199
    assert {tuple(r) for r in released} == {("ts", "user")}
    assert {tuple(r["user"]) for r in released} == {("salary",)}
    (dead,) = [json.loads(line) for line in files["dead"].read_text().splitlines()]
    assert "field 'user.salary': missing" in json.dumps(dead)


@pytest.mark.parametrize(
    ("dead", "limit", "code"),
    [
        (0, None, 0),
        (1, None, 0),  # 1 of 100 = 1%: not more than the default
        (2, None, 1),
        (2, "0.02", 0),
        (2, "0.019", 1),
        (100, "1", 0),
        (1, "0", 1),
    ],
)
def test_the_share_limit_is_a_strict_bound_on_the_records(
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    dead: int,
    limit: str | None,
    code: int,
) -> None:
    lines = [good(i) if i >= dead else json.dumps({"ts": i}) for i in range(100)]
    files["input"].write_text("\n".join(lines) + "\n\n\n")  # blank lines are no records
    assert run(files, *(("--max-dead-letter-share", limit) if limit else ())) == code
    err = capsys.readouterr().err
    assert ("were dead-lettered, more than" in err) == (code == 1)
    assert len(files["output"].read_text().splitlines()) == 100 - dead


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "lots"])
def test_a_share_outside_0_to_1_is_a_usage_error(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], value: str
) -> None:
    with pytest.raises(SystemExit) as done:
        run(files, "--max-dead-letter-share", value)
    assert done.value.code == 2
    assert "is not a share between 0 and 1" in capsys.readouterr().err
    assert not files["output"].exists()

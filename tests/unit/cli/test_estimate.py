"""``privstream estimate`` through the real entry point, and its reading layer.

The sanitized files are made with ``sanitize_stream`` and a seeded source, so
every number below is deterministic; the statistical assertions are loose
(5 standard errors: false failure below 6e-7 per assertion for random seeds).
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from privstream.cli.main import main
from privstream.cli.metadata import sidecar_path, write_sidecar
from privstream.cli.sanitize import sanitize_stream
from privstream.config import parse_config
from privstream.errors import PrivstreamError
from privstream.estimate import Options, StreamAggregate
from privstream.estimate.source import CONFIG_HEADER, Progress, read_topic
from privstream.kinds import build_plan
from privstream.testing import SeededSource

CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 20, delta: 1.0e-5}
fields:
  - {name: device_id, kind: drop}
  - {name: ts, kind: public}
  - {name: salary, kind: real, mechanism: laplace, bounds: [1000, 5000], epsilon: 3}
  - {name: state, kind: categorical, domain: [TX, CA, NY], epsilon: 2, memoize_by: device_id,
     memo_identity_trusted: true}
  - {name: ok, kind: boolean, epsilon: 1}
  - {name: clicks, kind: integer, bounds: [0, 4], epsilon: 3}
  - {name: url, kind: categorical, mechanism: local_hashing, epsilon: 3}
  - {name: hobbies, kind: set, universe: [chess, golf, judo], max_items: 2, epsilon: 2}
  - {name: curve, kind: functional, grid: [0, 0.5, 1], bandwidth: 0.5, rkhs_radius: 3,
     epsilon: 0.9, delta: 1.0e-6}
"""
N = 8_000


def _raw_records() -> list[dict[str, Any]]:
    rng = np.random.default_rng(2024)
    states = rng.choice(["TX", "CA", "NY"], size=N, p=[0.5, 0.3, 0.2])
    urls = rng.choice(["a.com", "b.com", "c.com"], size=N, p=[0.6, 0.3, 0.1])
    records = []
    for i in range(N):
        hobbies = [h for h, p in (("chess", 0.4), ("judo", 0.1)) if rng.random() < p]
        records.append(
            {
                "device_id": f"d{i}",
                "ts": i,
                "salary": float(rng.normal(3000, 700)),
                "state": str(states[i]),
                "ok": bool(rng.random() < 0.3),
                "clicks": int(rng.integers(0, 5)),
                "url": str(urls[i]),
                "hobbies": hobbies,
                "curve": [0.5, 1.0, 1.5],
            }
        )
    return records


@dataclass
class Files:
    config: Path
    raw: Path
    sanitized: Path
    records: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    base = tmp_path_factory.mktemp("estimate")
    config = base / "config.yaml"
    config.write_text(CONFIG)
    records = _raw_records()
    raw_lines = [json.dumps(r).encode() for r in records]
    raw_lines.append(b'{"device_id": "x", "ts": 1}')  # dead-lettered: missing fields
    raw = base / "raw.jsonl"
    raw.write_bytes(b"\n".join(raw_lines) + b"\n")
    plan = build_plan(parse_config(__import__("yaml").safe_load(CONFIG)))
    out = io.BytesIO()
    sanitize_stream(plan, raw_lines, out, str(base / "dead.jsonl"), SeededSource(99))
    bad = [
        b"not json",
        b"[1, 2]",
        b'{"salary": "lots", "state": "ZZ", "ok": 1, "url": {"seed": -1, "bucket": 0}}',
        b'{"hobbies": ["chess", "chess"], "curve": [1, 2], "clicks": 1.5}',
        b"",
    ]
    sanitized = base / "sanitized.jsonl"
    sanitized.write_bytes(out.getvalue() + b"\n".join(bad) + b"\n")
    write_sidecar(sidecar_path(str(sanitized)), plan, N)
    return Files(config, raw, sanitized, records)


def _estimate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["estimate", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _json(capsys: pytest.CaptureFixture[str], files: Files, *args: str) -> dict[str, Any]:
    code, out, err = _estimate(
        capsys,
        "--config",
        str(files.config),
        "--input",
        str(files.sanitized),
        "--format",
        "json",
        *args,
    )
    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    return report


def _field(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in report["fields"] if f["name"] == name)


def test_json_report_counts_skips_and_estimates_every_field(
    capsys: pytest.CaptureFixture[str], files: Files
) -> None:
    report = _json(
        capsys, files, "--candidates", "url=a.com,b.com,zz.com", "--truth", str(files.raw)
    )
    assert report["records_read"] == N + 2  # + the two bad objects
    assert report["records_skipped"] == {"invalid_json": 1, "not_object": 1}
    assert report["truth"]["records"] == N
    assert report["truth"]["skipped"] == {"missing_field": 1}
    names = [f["name"] for f in report["fields"]]
    assert names == ["salary", "state", "ok", "clicks", "url", "hobbies", "curve"]  # no public
    salary = _field(report, "salary")
    assert salary["records"] == N and salary["skipped"] == {"invalid": 1, "missing": 1}
    mean = salary["mean"]
    assert abs(mean["estimate"] - mean["true"]) < 5 * mean["stderr"]
    assert mean["ci"][0] < mean["estimate"] < mean["ci"][1]
    assert len(salary["histogram"]["bins"]) == 10
    assert salary["histogram"]["bins"][0]["lower"] == 1000.0
    assert salary["histogram"]["bins"][-1]["upper"] == 5000.0
    assert any("clamped" in note for note in salary["notes"])
    for name in ("state", "ok", "url", "hobbies"):
        for row in _field(report, name)["frequencies"]:
            assert abs(row["estimate"] - row["true"]) < 5 * row["stderr"], (name, row)
    state = _field(report, "state")
    assert [r["value"] for r in state["frequencies"]] == ["CA", "NY", "TX"]  # canonical order
    assert any("memoize_by device_id" in note for note in state["notes"])
    assert _field(report, "ok")["skipped"] == {"invalid": 1, "missing": 1}
    url = _field(report, "url")
    assert [r["value"] for r in url["frequencies"]] == ["a.com", "b.com", "zz.com"]
    assert url["skipped"] == {"invalid": 1, "missing": 1}
    assert _field(report, "hobbies")["skipped"] == {"invalid": 1, "missing": 1}
    clicks = _field(report, "clicks")
    assert clicks["histogram"]["integer_bins"] and len(clicks["histogram"]["bins"]) == 5
    curve = _field(report, "curve")["curve"]
    assert curve["points"] == [0.0, 0.5, 1.0]
    for i, true in enumerate(curve["true"]):
        assert abs(curve["mean"][i] - true) < 5 * curve["stderr"][i]


def test_table_output(capsys: pytest.CaptureFixture[str], files: Files) -> None:
    code, out, _ = _estimate(
        capsys,
        "--config",
        str(files.config),
        "--input",
        str(files.sanitized),
        "--field",
        "state",
        "--field",
        "salary",
        "--bins",
        "4",
        "--confidence",
        "0.9",
    )
    assert code == 0
    assert out.startswith(f"privstream estimate: {N + 2:,} records from {files.sanitized}")
    assert "skipped: invalid_json 1, not_object 1" in out
    assert f"state  categorical  randomized_response  eps=2 delta=0  n={N:,}" in out
    assert "90% CI" in out and "histogram: deconvolution" in out
    assert "ok  boolean" not in out  # not asked for
    assert out.count("[") > 4


def test_hashed_field_without_candidates_says_how(
    capsys: pytest.CaptureFixture[str], files: Files
) -> None:
    report = _json(capsys, files, "--field", "url")
    url = _field(report, "url")
    assert url["frequencies"] == []
    assert any("--candidates url=" in note for note in url["notes"])
    with_truth = _field(_json(capsys, files, "--field", "url", "--truth", str(files.raw)), "url")
    assert [r["value"] for r in with_truth["frequencies"]] == ["a.com", "b.com", "c.com"]


def test_candidates_from_a_file_and_set_subsets(
    capsys: pytest.CaptureFixture[str], files: Files, tmp_path: Path
) -> None:
    listing = tmp_path / "urls.txt"
    listing.write_text("b.com\n\nc.com\nb.com\n")
    report = _json(capsys, files, "--candidates", f"url=@{listing}", "--candidates", "hobbies=judo")
    assert [r["value"] for r in _field(report, "url")["frequencies"]] == ["b.com", "c.com"]
    assert [r["value"] for r in _field(report, "hobbies")["frequencies"]] == ["judo"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--candidates", "state=TX"], "randomized-response fields estimate their whole domain"),
        (["--candidates", "hobbies=chess,tennis"], "not in the field's domain or universe"),
        (["--candidates", "url"], "write FIELD=a,b,c"),
        (["--candidates", "url=@/nonexistent/x"], "cannot read"),
        (["--field", "nope"], "no released field of that name"),
        (["--field", "ts"], "a public field has nothing to estimate"),
        (["--bins", "0"], "--bins 0"),
        (["--confidence", "1"], "--confidence 1"),
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], files: Files, args: list[str], message: str
) -> None:
    code, out, err = _estimate(
        capsys, "--config", str(files.config), "--input", str(files.sanitized), *args
    )
    assert code == 2 and out == ""
    assert message in err


def test_stdin_and_empty_input(
    capsys: pytest.CaptureFixture[str], files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = files.sanitized.read_bytes().splitlines()[:50]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\n".join(lines))))
    metadata = sidecar_path(str(files.sanitized))
    code, out, _ = _estimate(
        capsys, "--config", str(files.config), "--input", "-", "--metadata", metadata,
        "--field", "ok",
    )  # fmt: skip
    assert code == 0 and "50 records from stdin" in out
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"garbage\n")))
    code, out, err = _estimate(
        capsys, "--config", str(files.config), "--input", "-", "--metadata", metadata
    )
    assert code == 1
    assert "no usable values" in out and "no sanitized records read from stdin" in err


def test_plots_are_written(
    capsys: pytest.CaptureFixture[str], files: Files, tmp_path: Path
) -> None:
    target = tmp_path / "plots"
    code, _, err = _estimate(
        capsys,
        "--config",
        str(files.config),
        "--input",
        str(files.sanitized),
        "--truth",
        str(files.raw),
        "--plot",
        str(target),
        *("--field", "salary", "--field", "state", "--field", "curve", "--field", "url"),
    )
    assert code == 0
    pngs = sorted(p.name for p in target.iterdir())
    assert pngs == ["curve.png", "salary.png", "state.png", "url.png"]
    assert all((target / p).read_bytes().startswith(b"\x89PNG") for p in pngs)
    assert f"4 plot(s) written to {target}" in err


def test_plot_without_matplotlib_is_a_clear_error(
    capsys: pytest.CaptureFixture[str],
    files: Files,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    code, out, err = _estimate(
        capsys,
        "--config",
        str(files.config),
        "--input",
        str(files.sanitized),
        "--plot",
        str(tmp_path / "p"),
    )
    assert code == 2 and out == ""
    assert "pip install 'privstream[plot]'" in err
    assert not (tmp_path / "p").exists()


# --- progress --------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal_and_after_the_threshold() -> None:
    clock = _Clock()
    quiet = io.StringIO()
    progress = Progress(quiet, None, threshold=10, clock=clock)
    for count in range(0, 100, 5):
        clock.now += 1
        progress.update(count)
    progress.finish()
    assert quiet.getvalue() == ""  # not a terminal, not forced
    tty = _Tty()
    progress = Progress(tty, None, threshold=10, clock=clock)
    progress.update(5)
    assert tty.getvalue() == ""  # below the threshold
    clock.now += 2
    progress.update(40)
    progress.finish()
    text = tty.getvalue()
    assert text.startswith("\rprivstream estimate: 40 records read (")
    assert text.endswith(", done\033[K\n")
    forced = io.StringIO()
    progress = Progress(forced, True, threshold=0, total=200, clock=clock)
    clock.now += 10
    progress.update(100)
    assert forced.getvalue().endswith("records read (10/s), offsets 50% of 200\n")


# --- the topic reader, against a fake consumer ---------------------------------------------


@dataclass
class _Message:
    offset: int
    value: bytes | None
    headers: list[tuple[str, bytes]]


class FakeConsumer:
    """Partitions of (offset, value, headers); ``end`` offsets may exceed the last record
    (transaction markers and aborted records take offsets the reader never sees)."""

    def __init__(self, topic: str, partitions: dict[int, list[_Message]], end: dict[int, int]):
        self.topic = topic
        self.data = partitions
        self.end = end
        self.positions: dict[Any, int] = {}
        self.started = self.stopped = False
        self.paused: set[Any] = set()
        self.stall = False

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def topics(self) -> set[str]:
        return {self.topic, "other"}

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(self.data) if topic == self.topic else None

    def assign(self, partitions: list[Any]) -> None:
        self.positions = {tp: 0 for tp in partitions}

    async def seek_to_beginning(self, *partitions: Any) -> None:
        for tp in partitions:
            self.positions[tp] = 0

    async def beginning_offsets(self, partitions: list[Any]) -> dict[Any, int]:
        return {tp: 0 for tp in partitions}

    async def end_offsets(self, partitions: list[Any]) -> dict[Any, int]:
        return {tp: self.end[tp.partition] for tp in partitions}

    async def getmany(
        self, *partitions: Any, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[Any, list[_Message]]:
        await asyncio.sleep(0)
        out = {}
        for tp in partitions:
            if tp in self.paused or self.stall:
                continue
            batch = [m for m in self.data[tp.partition] if m.offset >= self.positions[tp]][:3]
            if batch:
                out[tp] = batch
                self.positions[tp] = batch[-1].offset + 1
            else:  # only markers left: the position moves to the log end
                self.positions[tp] = max(self.positions[tp], self.end[tp.partition] + 5)
        return out

    async def position(self, partition: Any) -> int:
        return self.positions[partition]

    def pause(self, *partitions: Any) -> None:
        self.paused.update(partitions)


def _run_read(
    consumer: FakeConsumer, topic: str, config: str, **kw: Any
) -> tuple[Any, list[bytes], list[str]]:
    got: list[bytes] = []
    skipped: list[str] = []

    async def go() -> Any:
        return await read_topic(
            consumer, topic, got.append, expected_config=config, skip=skipped.append, **kw
        )

    return asyncio.run(go()), got, skipped


def test_topic_reader_stops_at_the_end_offsets_and_checks_the_config() -> None:
    good = [(CONFIG_HEADER, b"abc")]
    data = {
        0: [_Message(0, b"r0", good), _Message(1, b"r1", good), _Message(5, b"late", good)],
        1: [_Message(0, b"other-config", [(CONFIG_HEADER, b"xyz")]), _Message(2, b"r2", [])],
        2: [],
    }
    consumer = FakeConsumer("clean", data, end={0: 4, 1: 3, 2: 0})
    read, got, skipped = _run_read(consumer, "clean", "abc")
    assert sorted(got) == [b"r0", b"r1", b"r2"]  # offset 5 came after the start
    assert skipped == ["config_mismatch"]
    assert (read.partitions, read.records, read.expected) == (3, 3, 7)
    assert read.without_config_header == 1 and read.config_mismatch == 1
    assert consumer.started and consumer.stopped


def test_topic_reader_errors() -> None:
    consumer = FakeConsumer("clean", {0: []}, end={0: 0})
    with pytest.raises(PrivstreamError, match="topic 'nope' does not exist"):
        _run_read(consumer, "nope", "abc")
    assert consumer.stopped
    stalled = FakeConsumer("clean", {0: [_Message(0, b"r", [])]}, end={0: 1})
    stalled.stall = True
    clock = _Clock()

    def ticking() -> float:
        clock.now += 1.0
        return clock.now

    with pytest.raises(PrivstreamError, match=r"no progress for 5 s on partition\(s\) 0"):
        _run_read(stalled, "clean", "abc", idle_timeout=5.0, clock=ticking)


def test_stream_aggregate_never_raises_on_garbage() -> None:
    plan = build_plan(parse_config(__import__("yaml").safe_load(CONFIG)))
    stream = StreamAggregate(plan, Options())
    junk: Iterator[bytes] = iter(
        [b"\xff\xfe", b"NaN", b'{"salary": NaN}', b"[" * 100_000, b"{}", b'{"url": [1]}', b"7"]
    )
    stream.consume(junk)
    assert stream.records == 2
    assert stream.skipped == {"invalid_utf8": 1, "invalid_json": 3, "not_object": 1}

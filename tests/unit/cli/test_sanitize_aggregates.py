"""``privstream sanitize --aggregates-output`` and ``explain`` on aggregates, through main."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from privstream.cli.main import main

CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 250}
fields:
  - {name: user, kind: drop}
  - {name: version, kind: public}
  - {name: os, kind: categorical, domain: [ios, android], epsilon: 0.5}
  - {name: latency, kind: real, bounds: [0, 100], epsilon: 0.5}
aggregates:
  - {name: per_version, query: count, group_by: [{field: version, keys: ["1.0", "2.0"]}],
     epsilon: 60}
  - {name: os_share, query: histogram, field: os, epsilon: 60}
"""


def lines(n: int) -> str:
    rows = [
        {
            "user": i,
            "version": ["1.0", "2.0", "3.0"][i % 3],
            "os": ["ios", "android"][i % 2],
            "latency": i % 100,
        }
        for i in range(n)
    ]
    return "".join(json.dumps(row) + "\n" for row in rows)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    raw = tmp_path / "in.jsonl"
    raw.write_text(lines(60) + '{"user": 1, "os": "ios"}\n' + "not json\n")
    return {
        "config": config,
        "input": raw,
        "output": tmp_path / "out.jsonl",
        "aggregates": tmp_path / "agg.jsonl",
        "dead": tmp_path / "dead.jsonl",
    }


def sanitize(files: dict[str, Path], *extra: str) -> int:
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
            "--max-dead-letter-share",
            "1",
            *extra,
        ]
    )


def test_the_aggregates_count_the_released_records_of_the_whole_file(
    files: dict[str, Path],
) -> None:
    """At epsilon 60 the noise is 0 but with probability 2e^-60/(1+e^-60): exact counts.

    The two bad lines (one misses its fields, one is not JSON) are dead-lettered and
    in no aggregate: the aggregates read exactly the released records.
    """
    assert sanitize(files, "--aggregates-output", str(files["aggregates"])) == 0
    rows = [json.loads(line) for line in files["aggregates"].read_text().splitlines()]
    values = {(r["aggregate"], json.dumps(r["group"])): r["value"] for r in rows}
    assert values == {
        ("per_version", '{"version": "1.0"}'): 20,
        ("per_version", '{"version": "2.0"}'): 20,
        ("os_share", '{"os": "ios"}'): 30,
        ("os_share", '{"os": "android"}'): 30,
    }
    assert {r["window"] for r in rows} == {"file"}
    assert all(r["epsilon"] == 60 and r["delta"] == 0 for r in rows)
    assert len(files["output"].read_text().splitlines()) == 60


def test_a_config_with_aggregates_needs_the_option_and_nothing_is_written(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert sanitize(files) == 2
    assert "--aggregates-output PATH" in capsys.readouterr().err
    assert not files["output"].exists()


def test_the_option_without_aggregates_is_refused(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["config"].write_text(CONFIG.split("aggregates:")[0])
    assert sanitize(files, "--aggregates-output", str(files["aggregates"])) == 2
    assert "the config has no aggregates" in capsys.readouterr().err


def test_an_earlier_release_of_the_aggregates_is_never_overwritten_silently(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["aggregates"].write_text("earlier\n")
    assert sanitize(files, "--aggregates-output", str(files["aggregates"])) == 2
    assert "a second release whose epsilon adds" in capsys.readouterr().err
    assert files["aggregates"].read_text() == "earlier\n"
    assert sanitize(files, "--aggregates-output", str(files["aggregates"]), "--overwrite") == 0
    assert len(files["aggregates"].read_text().splitlines()) == 4


@pytest.mark.parametrize("other", ["input", "output", "dead"])
def test_the_aggregates_file_is_none_of_the_others(
    files: dict[str, Path], other: str, capsys: pytest.CaptureFixture[str]
) -> None:
    files[other].touch()
    assert sanitize(files, "--aggregates-output", str(files[other]), "--overwrite") == 2
    assert "the aggregates would replace it" in capsys.readouterr().err


def test_explain_shows_each_sensitivity_the_noise_and_the_totals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        CONFIG.replace(
            "epsilon: 60}",
            "epsilon: 1,\n     correlation: {by: user, degree: 0.5, max_group: 10}}",
            1,
        )
    )
    assert main(["explain", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    table = out[out.index("aggregate  ") :].splitlines()
    assert table[0].split() == [
        "aggregate",
        "query",
        "epsilon",
        "delta",
        "cells",
        "sens",
        "indep",
        "naive",
        "scale",
        "E[error]",
        "ci95",
        "+-",
    ]
    # two cells: the cap's swap counts, 1 + 0.5 * 9 + 1 = 6.5 (naive 10, independent 1)
    assert table[2].split()[:8] == ["per_version", "count", "1", "0", "2", "6.5", "1", "10"]
    assert "aggregates per record per window (added or removed): epsilon=61 delta=0" in out
    assert "epsilon=122" in out
    assert main(["explain", "--config", str(config), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)["aggregates"]
    assert data["aggregates"][0]["parts"][0]["sensitivity_naive"] == 10.0


def test_an_aggregate_no_noise_can_serve_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    tiny = "{name: tiny, query: count, epsilon: 1e-13, group_by: [{field: os}]}"
    config.write_text(CONFIG.split("aggregates:")[0] + f"aggregates:\n  - {tiny}\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", "--config", str(config)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "config error: aggregates: aggregate 'tiny': epsilon 1e-13 is below" in err
    assert "raise epsilon" in err


def test_run_refuses_aggregates_without_a_window_rather_than_leave_them_unanswered(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--config", str(files["config"])]) == 2
    err = capsys.readouterr().err
    assert "config error: aggregates (" in err
    assert "give window: {size_seconds: 3600} and output_topic" in err


def test_a_density_over_a_file_releases_one_row_per_grid_point(tmp_path: Path) -> None:
    config = tmp_path / "d.yaml"
    config.write_text(
        CONFIG.split("aggregates:")[0].replace(
            "privacy: {epsilon: 250}", "privacy: {epsilon: 5, delta: 1e-5}"
        )
        + "aggregates:\n  - {name: lat, query: density, field: latency, bounds: [0, 100], "
        "grid: [0, 25, 50, 75, 100], bandwidth: 10, epsilon: 1, delta: 1e-6}\n"
    )
    raw = tmp_path / "in.jsonl"
    raw.write_text(lines(300))
    out, rows = tmp_path / "out.jsonl", tmp_path / "rows.jsonl"
    args = ["sanitize", "--config", str(config), "--input", str(raw), "--output", str(out)]
    assert main([*args, "--aggregates-output", str(rows)]) == 0
    released = [json.loads(line) for line in rows.read_text().splitlines()]
    assert [r["group"] for r in released] == [{"latency": x} for x in (0, 25, 50, 75, 100)]
    assert all(r["epsilon"] == 1 and 0 < r["delta"] <= 1e-6 for r in released)


def test_file_mode_ignores_window_time_the_file_is_one_window(tmp_path: Path) -> None:
    """docs/aggregates.md, "Event time from a field": the released records count in the
    one window whatever their time, years apart (epsilon 60: exact but with probability
    2e^-60/(1+e^-60)); a record whose time is unparseable is dead-lettered by the record
    path (``on_missing: dead_letter``), so in no aggregate, as in every file-mode run."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}\n"
        "privacy: {epsilon: 250}\n"
        "fields:\n  - {name: at, kind: timestamp, granularity: 1h}\n"
        "aggregates:\n  - {name: n, query: count, epsilon: 60,\n"
        "     window: {size_seconds: 60, time: at}, output_topic: agg}\n"
    )
    times = ["1990-01-01T00:00:00Z", "2026-11-28T10:00:00Z", 1_800_000_000, "garbage"]
    raw = tmp_path / "in.jsonl"
    raw.write_text("".join(json.dumps({"at": t}) + "\n" for t in times))
    files = {"config": config, "input": raw, "output": tmp_path / "out.jsonl"}
    files |= {"dead": tmp_path / "dead.jsonl", "aggregates": tmp_path / "agg.jsonl"}
    assert sanitize(files, "--aggregates-output", str(files["aggregates"])) == 0
    (row,) = [json.loads(line) for line in files["aggregates"].read_text().splitlines()]
    assert (row["window"], row["value"]) == ("file", 3)
    assert len(files["dead"].read_text().splitlines()) == 1


def test_run_refuses_a_record_limit_too_small_for_one_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``select_groups`` key may take 1.5 KiB: 1 KiB records could never commit a close
    (red team 14a, finding 5). Refused before any Kafka client starts."""
    config = tmp_path / "limit.yaml"
    config.write_text(
        CONFIG.split("aggregates:")[0]
        .replace("kafka: {", "kafka: {max_message_bytes: 1024, ")
        .replace("{epsilon: 250}", "{epsilon: 250, delta: 1e-4}")
        + "aggregates:\n  - {name: v, query: count, group_by: [{field: version}], "
        "select_groups: true, epsilon: 1, delta: 1e-6, window: {size_seconds: 10}, "
        "output_topic: agg}\n"
    )
    assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "config error: aggregates (v): its records take up to" in err
    assert "one cell's partial record" in err and "one released row" in err  # 14c, F3
    assert "kafka.max_message_bytes=1024" in err and "raise kafka.max_message_bytes" in err

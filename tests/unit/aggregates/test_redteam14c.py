"""Red team 14c (branch i34-next at 58be349): file mode's aggregates against ``run``'s.

Failing tests, one per finding; no product code is changed here. File mode decodes a
line ``orjson`` refuses through ``json`` (``aggregates_file._parse``); ``run`` leaves
the record out of every aggregate (``stream._parse``). A lone UTF-16 surrogate escape
(``"\\ud800"``) is such a line, and the record path releases it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
from privstream.aggregates import build_aggregates
from privstream.aggregates.stream import OpenWindows
from privstream.aggregates.windows import View
from privstream.cli.aggregates_file import FileAggregates
from privstream.cli.main import main
from privstream.config import AppConfig, parse_config

#: a record whose unrelated field ``note`` is a lone surrogate (valid JSON text, RFC 8259
#: section 8.2 leaves its meaning open): the record path releases it
SURROGATE_LINE = b'{"user": 1, "version": "1.0", "os": "ios", "note": "\\ud800"}'
PLAIN_LINE = b'{"user": 2, "version": "1.0", "os": "ios"}'


def _config(aggregate: dict[str, Any]) -> AppConfig:
    return parse_config(
        {
            "kafka": {"input_topic": "raw", "output_topic": "out", "dead_letter_topic": "dlq"},
            "privacy": {"epsilon": 250.0, "delta": 1e-3},
            "fields": [
                {"name": "user", "kind": "drop"},
                {"name": "version", "kind": "public"},
                {"name": "os", "kind": "categorical", "domain": ["ios", "android"], "epsilon": 0.5},
            ],
            "aggregates": [aggregate],
        }
    )


COUNT = {
    "name": "per_os",
    "query": "histogram",
    "field": "os",
    "epsilon": 1.0,
    "window": {"size_seconds": 10, "grace_seconds": 2},
    "output_topic": "agg",
}


def _run_counts(config: AppConfig, lines: list[bytes]) -> dict[str, int]:
    """What ``run``'s ``OpenWindows`` counts of the lines (one partition, one window)."""
    plans = build_aggregates(config)
    view = View(epoch_ms=0)
    windows = OpenWindows(plans, view)
    for offset, line in enumerate(lines):
        windows.add(0, offset, 1_000, line, 1_500, misplaced=False)
    counts: dict[str, int] = {}
    for key, value in windows.close(0, 12_500):
        if value is not None and orjson.loads(key)["t"] == "partial":
            for cell, n in orjson.loads(value)["counts"]:
                counts[cell[0]] = counts.get(cell[0], 0) + n
    return counts


def _file_counts(config: AppConfig, lines: list[bytes]) -> dict[str, int]:
    """What ``sanitize --aggregates-output`` counts of the same released lines."""
    file = FileAggregates(build_aggregates(config))
    file.feed(lines, list(range(len(lines))))
    partial = file._accumulators[0].partial()  # the exact counts, before any noise
    return {str(cell[0]): n for cell, n in partial.counts.items() if n}


def test_file_mode_and_run_count_the_same_records_of_the_same_input() -> None:
    """Finding 2 (LOW): a line with a lone surrogate in any field (here one no aggregate
    reads) is counted by file mode (``json`` fallback) but left out by ``run`` (``orjson``
    only): the two modes release different data for the same input. Deterministic."""
    config = _config(COUNT)
    lines = [PLAIN_LINE, SURROGATE_LINE]
    assert _run_counts(config, lines) == _file_counts(config, lines)


def test_a_selected_group_key_that_is_a_lone_surrogate_does_not_crash_sanitize(
    tmp_path: Path,
) -> None:
    """Finding 1 (MEDIUM, availability): one input line whose ``select_groups`` key is
    ``"\\ud800"`` makes ``sanitize --aggregates-output`` die with a TypeError traceback
    (exit 1, no output at all: ``AggregatePlan.cell_ids`` orjson-encodes the key), though
    the record path alone releases the line. Expected: exit 0, the other rows written.
    Deterministic (no assertion on a noisy value)."""
    aggregate = {
        "name": "per_version",
        "query": "count",
        "group_by": [{"field": "version"}],
        "select_groups": True,
        "delta": 1e-6,
        "epsilon": 5.0,
    }
    config = {
        "kafka": {"input_topic": "raw", "output_topic": "out", "dead_letter_topic": "dlq"},
        "privacy": {"epsilon": 250.0, "delta": 1e-3},
        "fields": [
            {"name": "user", "kind": "drop"},
            {"name": "version", "kind": "public"},
            {"name": "os", "kind": "categorical", "domain": ["ios", "android"], "epsilon": 0.5},
        ],
        "aggregates": [aggregate],
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    hostile = b'{"user": 0, "version": "\\ud800", "os": "ios"}\n'
    plain = b"".join(b'{"user": %d, "version": "1.0", "os": "ios"}\n' % i for i in range(1, 40))
    (tmp_path / "in.jsonl").write_bytes(hostile + plain)
    code = main(
        [
            "sanitize",
            "--config",
            str(tmp_path / "config.json"),
            "--input",
            str(tmp_path / "in.jsonl"),
            "--output",
            str(tmp_path / "out.jsonl"),
            "--dead-letter",
            str(tmp_path / "dead.jsonl"),
            "--max-dead-letter-share",
            "1",
            "--aggregates-output",
            str(tmp_path / "agg.jsonl"),
        ]
    )
    assert code == 0
    assert (tmp_path / "agg.jsonl").exists()


def test_run_accepts_no_record_limit_its_release_rows_cannot_meet() -> None:
    """Finding 3 (MEDIUM, a producer stalls every release): ``record_problems`` checks that
    one cell of a PARTIAL fits ``kafka.max_message_bytes``, never that a released ROW does.
    A row repeats the group key in its message key and value (with the aggregate, window,
    CI, ...), so at the smallest limit ``run`` accepts, a ``select_groups`` key of 256
    control characters (each escaped to 6 bytes, as the cell check itself assumes) makes a
    row the producer refuses (``MessageSizeTooLargeError``, a KafkaError: the session is
    retried, the same due window is released again and refused again, forever; every
    aggregate's releases share that transaction). Deterministic (sizes only)."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder
    from privstream.aggregates import KeyedCells, Partial, record_problems, release
    from privstream.aggregates.windows import window_label

    aggregate = {
        "name": "per_version",
        "query": "count",
        "group_by": [{"field": "version"}],
        "select_groups": True,
        "delta": 1e-6,
        "epsilon": 5.0,
        "window": {"size_seconds": 10, "grace_seconds": 2},
        "output_topic": "agg",
    }

    def plans_at(limit: int) -> Any:
        config = _config(aggregate).model_dump()
        config["kafka"]["max_message_bytes"] = limit
        return build_aggregates(parse_config(config))

    (default,) = plans_at(4096)
    limit = default.least_message_bytes  # the least run accepts (was: one cell's record)
    assert not record_problems(plans_at(limit), limit)
    assert record_problems(plans_at(limit - 1), limit - 1)
    (plan,) = plans_at(limit)
    key = "\x01" * 256  # a select_groups key of MAX_KEY_CHARS characters
    label = window_label(0, 10_000)
    rows = release(
        plan, Partial(plan.name, label, {(key,): 1_000_000}), KeyedCells(b"k" * 32, "raw")
    )
    assert rows, "the group passes the threshold at a million records"
    for row in rows:
        names = {"aggregate": row["aggregate"], "window": row["window"], "group": row["group"]}
        size = DefaultRecordBatchBuilder.estimate_size_in_bytes(
            orjson.dumps(names), orjson.dumps(row), []
        )
        assert size <= limit, f"a {size}-byte row under kafka.max_message_bytes={limit}"


def test_the_least_limit_run_accepts_holds_a_row_of_two_selected_keys() -> None:
    """Finding 3, as documented: docs/aggregates.md said "with ``select_groups``, a key may
    take 1.5 KiB: 4 KiB suffices"; ``run`` accepted 4096 for two ``select_groups`` fields,
    and one row of two 256-character control keys is 6574 bytes. Now ``run`` refuses 4096
    and the least limit it accepts holds the row. Deterministic (sizes only)."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder
    from privstream.aggregates import KeyedCells, Partial, record_problems, release
    from privstream.aggregates.windows import window_label

    aggregate = {
        "name": "per_version_os",
        "query": "count",
        "group_by": [{"field": "version"}, {"field": "os"}],
        "select_groups": True,
        "delta": 1e-6,
        "epsilon": 5.0,
        "window": {"size_seconds": 10, "grace_seconds": 2},
        "output_topic": "agg",
    }
    config = {
        "kafka": {
            "input_topic": "raw",
            "output_topic": "out",
            "dead_letter_topic": "dlq",
            "max_message_bytes": 4096,
        },
        "privacy": {"epsilon": 250.0, "delta": 1e-3},
        "fields": [{"name": n, "kind": "public"} for n in ("version", "os")],
        "aggregates": [aggregate],
    }
    (refused,) = build_aggregates(parse_config(config))
    (problem,) = record_problems([refused], 4096)
    assert f"at least {refused.least_message_bytes}" in problem
    limit = refused.least_message_bytes
    config["kafka"]["max_message_bytes"] = limit
    (plan,) = build_aggregates(parse_config(config))
    assert not record_problems([plan], limit)
    key = "\x01" * 256
    cells = {(key, key): 1_000_000}
    partial = Partial(plan.name, window_label(0, 10_000), cells)
    (row,) = release(plan, partial, KeyedCells(b"k" * 32, "raw"))
    names = {"aggregate": row["aggregate"], "window": row["window"], "group": row["group"]}
    size = DefaultRecordBatchBuilder.estimate_size_in_bytes(
        orjson.dumps(names), orjson.dumps(row), []
    )
    assert size <= limit, f"a {size}-byte row under kafka.max_message_bytes={limit}"


def test_the_latest_value_gauge_holds_only_the_latest_windows_groups() -> None:
    """Finding 4 (LOW, metrics): ``privstream_aggregate_value`` is documented as "the
    latest released window's noisy value per group", but ``Metrics.observe_window`` only
    sets labels and never removes one: with ``select_groups`` a group released in an
    earlier window and not selected in the latest one still shows its old value as the
    latest (and the label set grows with every group ever released, unbounded by the
    open windows). Deterministic."""
    from privstream.metrics import Metrics
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    metrics = Metrics(registry)
    first = [{"group": {"version": "1.0"}, "value": 5.0}, {"group": {"version": "2.0"}, "value": 7}]
    metrics.observe_window("per_version", 10_000, first)
    metrics.observe_window("per_version", 20_000, [{"group": {"version": "1.0"}, "value": 6}])
    stale = registry.get_sample_value(
        "privstream_aggregate_value", {"aggregate": "per_version", "group": '{"version":"2.0"}'}
    )
    assert stale is None, f"group 2.0 was not released in the latest window, yet shows {stale}"

"""A group key or subject that JSON cannot write leaves its record out of the aggregates.

File mode read a line through ``json`` when orjson refused it, which accepts a lone
surrogate (``"\\ud800"``); it cannot be written back as JSON, nor can an integer past 64
bits (records not read from a file), so such a key was a crash of ``sanitize
--aggregates-output`` (exit 1, no output at all: red team 14c, finding 1). Each is now no
key (no subject): the record is left out of the aggregates, decided by that record alone,
while the record path releases it as before. File mode now also leaves out every line
orjson refuses, as ``run`` does (finding 2): a lone surrogate anywhere in the line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from privstream.aggregates.read import RecordReader, _keyable
from privstream.cli.main import main

UNWRITABLE = ["\ud800", 2**64, -(2**63) - 1]


@pytest.mark.parametrize("key", [*UNWRITABLE, True, 1.5, None, [1]])
def test_no_key(key: object) -> None:
    assert not _keyable(key)


@pytest.mark.parametrize("key", ["1.0", "", "é", 0, 2**64 - 1, -(2**63)])
def test_a_key(key: object) -> None:
    assert _keyable(key)


@pytest.mark.parametrize("subject", UNWRITABLE)
def test_no_subject(subject: object) -> None:
    assert RecordReader.identity({"user": subject}, "user") is None


def _sanitize(tmp_path: Path, aggregate: dict[str, Any], lines: list[bytes]) -> list[Any]:
    config = {
        "privacy": {"epsilon": 250.0, "delta": 1e-3, "subject": "user"},
        "fields": [{"name": "user", "kind": "drop"}, {"name": "version", "kind": "public"}],
        "aggregates": [aggregate],
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "in.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    paths = {name: str(tmp_path / name) for name in ("out", "dead", "agg")}
    code = main(
        [
            *("sanitize", "--config", str(tmp_path / "config.json")),
            *("--input", str(tmp_path / "in.jsonl"), "--output", paths["out"]),
            *("--dead-letter", paths["dead"], "--aggregates-output", paths["agg"]),
        ]
    )
    assert code == 0
    assert len(Path(paths["out"]).read_text().splitlines()) == len(lines)  # all released
    return [json.loads(row) for row in Path(paths["agg"]).read_text().splitlines()]


HOSTILE = [
    b'{"user": 0, "version": "\\ud800"}',
    b'{"user": 1, "version": 123456789012345678901234567890}',
]
PLAIN = [b'{"user": %d, "version": "1.0"}' % i for i in range(2, 40)]


def test_selected_groups_leave_out_unwritable_keys(tmp_path: Path) -> None:
    aggregate = {
        "name": "per_version",
        "query": "count",
        "group_by": [{"field": "version"}],
        "select_groups": True,
        "delta": 1e-6,
        "epsilon": 5.0,
        "contribution": {"records_per_group": 1, "groups_per_subject": 1},
    }
    rows = _sanitize(tmp_path, aggregate, HOSTILE + PLAIN)
    assert [row["group"] for row in rows] == [{"version": "1.0"}]


def test_unwritable_subjects_are_left_out(tmp_path: Path) -> None:
    """At epsilon 100 the discrete noise is 0 but with probability 2e^-100 / (1 + e^-100)
    (about 7e-44): the count is the 38 plain records', the line orjson refuses out."""
    aggregate = {
        "name": "n",
        "query": "count",
        "epsilon": 100.0,
        "contribution": {"records_per_group": 1, "groups_per_subject": 1},
    }
    # (a 30-digit integer subject is no case here: orjson reads it as a float, a subject)
    lines = [b'{"user": "\\ud800", "version": "1.0"}', *PLAIN]
    (row,) = _sanitize(tmp_path, aggregate, lines)
    assert row["value"] == len(PLAIN)

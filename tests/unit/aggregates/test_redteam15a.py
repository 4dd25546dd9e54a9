"""Red team 15a (on i34-next at eef0687): failing tests for its findings.

F1 (LOW): a declared key JSON cannot write (an integer past 64 bits, a lone surrogate:
both load from a JSON config, ``json`` reads them) passes config load, and the key rule
of red team 14c (``read._keyable``) then only keeps records out of its cell. The plan
still writes the key: ``AggregatePlan.row_bytes`` (the F3 check ``run`` makes before it
starts) and ``AggregatePlan.cell_ids`` (every release) call ``orjson.dumps`` on it and
raise a bare ``TypeError``. ``run`` dies with a traceback at its config check, and
``sanitize --aggregates-output`` reads the whole input, then dies with one (exit 1, no
message naming the key) instead of a ConfigError at load (exit 2).

F2 (MEDIUM, docs): the aggregates' internal topic holds each closed window's EXACT
per-cell totals and, with ``select_groups``, every raw group key a record reached,
released or not; the docs flag the dead-letter topic as "as sensitive as the input",
never this topic.

F3 (MEDIUM): a categorical field's domain edited to another of the same size keeps the
aggregate's ``partial_id``; partials of both domains merge and every release raises
(``test_a_changed_domain_is_a_new_plan_never_merged_into_a_release``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from privstream.aggregates import build_aggregates
from privstream.aggregates.partial import Partial
from privstream.aggregates.plan import record_problems
from privstream.aggregates.stream import OpenWindows, releases
from privstream.aggregates.windows import View, encode_partial, epoch_record
from privstream.cli.main import main
from privstream.config import parse_config
from privstream.errors import PrivstreamError

from tests.support.aggregates import Seeded

#: keys a JSON config loads (``json`` reads them) that orjson cannot write
UNWRITABLE = [2**64, -(2**63) - 1, "\ud800"]
#: the wall clock of the stream tests, ms (a window start: 10 s windows)
NOW = 1_000_000
DOCS = Path(__file__).resolve().parents[3] / "docs"


def _config(keys: list[Any], histogram: bool) -> dict[str, Any]:
    if histogram:
        field = {"name": "v", "kind": "categorical", "domain": keys, "epsilon": 0.5}
        aggregate = {"name": "n", "query": "histogram", "field": "v", "epsilon": 1}
    else:
        field = {"name": "v", "kind": "public"}
        group = [{"field": "v", "keys": keys}]
        aggregate = {"name": "n", "query": "count", "group_by": group, "epsilon": 1}
    return {"privacy": {"epsilon": 10.0}, "fields": [field], "aggregates": [aggregate]}


@pytest.mark.parametrize("histogram", [False, True], ids=["group_by", "histogram"])
@pytest.mark.parametrize("key", UNWRITABLE, ids=["2**64", "-2**63-1", "lone-surrogate"])
def test_a_declared_key_json_cannot_write_is_refused_by_the_error_root(
    key: Any, histogram: bool
) -> None:
    """Config load (or the plan) refuses the key with the project's error, naming it; never
    a bare TypeError out of ``run``'s record-size check or a release."""
    with pytest.raises(PrivstreamError):
        plans = build_aggregates(parse_config(_config([1, key], histogram)))
        record_problems(plans, 2**20)  # run's check before it starts (red team 14c, F3)
        plans[0].cell_ids()  # every release names its cells so


def test_sanitize_refuses_an_unwritable_declared_key_before_reading(tmp_path: Path) -> None:
    """``sanitize --aggregates-output`` exits 2 at load; it read the whole input and died
    with a traceback (exit 1) at the release."""
    (tmp_path / "config.json").write_text(json.dumps(_config([1, 2**64], histogram=False)))
    (tmp_path / "in.jsonl").write_text('{"v": 1}\n' * 3)
    argv = [
        *("sanitize", "--config", str(tmp_path / "config.json")),
        *("--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "out.jsonl")),
        *("--dead-letter", str(tmp_path / "dead.jsonl")),
        *("--aggregates-output", str(tmp_path / "agg.jsonl")),
    ]
    try:
        code = main(argv)
    except TypeError as exc:  # what eef0687 does
        pytest.fail(f"sanitize raised {exc!r} instead of refusing the config (exit 2)")
    except SystemExit as exc:  # the config loader's refusal
        code = exc.code
    assert code == 2
    assert not (tmp_path / "agg.jsonl").exists()


def test_the_internal_topic_is_documented_as_sensitive_as_the_input() -> None:
    """The bytes ``run`` commits to ``<input>-privstream-aggregates`` when a window closes
    hold the exact count and the raw key of a group only one subject reached (released
    or not: ``select_groups`` drops it only from the output). Compaction keeps them past
    the release's tombstone (the active segment is never compacted: ``segment.ms``, 7
    days by default). Like the dead-letter topic (docs/index.md, docs/design.md), the
    docs must tell operators to keep this topic as they keep the input."""
    partial = Partial("n", "w", {("alice@example.com",): 3}, {})
    (record,) = encode_partial(partial)
    assert b"alice@example.com" in record and b"3" in record  # exact, un-noised
    text = (DOCS / "aggregates.md").read_text()
    sentences = [s for s in text.replace("\n", " ").split(". ") if "privstream-aggregates" in s]
    assert any("sensitive" in s or "as you keep the input" in s for s in sentences), (
        "docs/aggregates.md never says the internal topic (exact totals, every group key "
        "seen) is as sensitive as the input topic"
    )


def _histogram_plans(domain: list[str]) -> list[Any]:
    """A histogram over a categorical field whose domain is ``domain`` (same size each)."""
    config = {
        "kafka": {"input_topic": "raw", "output_topic": "out", "dead_letter_topic": "dlq"},
        "privacy": {"epsilon": 10.0},
        "fields": [{"name": "os", "kind": "categorical", "domain": domain, "epsilon": 0.5}],
        "aggregates": [
            {
                **{"name": "h", "query": "histogram", "field": "os", "epsilon": 1.0},
                **{"window": {"size_seconds": 10, "grace_seconds": 2}, "output_topic": "agg"},
            }
        ],
    }
    return list(build_aggregates(parse_config(config)))


def _close_one(windows: OpenWindows, view: View, partition: int, os_name: str) -> None:
    record = json.dumps({"os": os_name}).encode()
    windows.add(partition, 0, NOW, record, NOW, misplaced=False)
    for key, value in windows.close(partition, NOW + 30_000):
        view.apply(key, value)


def test_a_changed_domain_is_a_new_plan_never_merged_into_a_release() -> None:
    """F3 (MEDIUM): docs/aggregates.md "A plan changed" says a partial committed under
    another plan is left out, never merged. A histogram's bins (or a group-by's keys
    taken from a categorical field) are the FIELD's ``domain``, outside the aggregate's
    spec: ``release_id`` hashes the spec, the cell COUNT and the noise, so a domain
    edited to another of the same size ("web" -> "linux") keeps the ``partial_id``.
    A window closed on partition 0 before the change and on partition 1 after it merges
    both partials; ``release._check`` then raises MisuseError ("a partial holds a cell
    it does not declare") at every step: the session restarts, reads the same partials
    and fails again, and no aggregate of the config releases any window again (the
    documented procedure, every replica stopped before the change, does not avoid it)."""
    before, after = _histogram_plans(["ios", "web"]), _histogram_plans(["ios", "linux"])
    view = View()
    view.apply(*epoch_record(NOW))  # the first window is the records' one
    _close_one(OpenWindows(before, view), view, 0, "web")  # the old config's close
    _close_one(OpenWindows(after, view), view, 1, "linux")  # restarted on the new domain
    assert before[0].partial_id != after[0].partial_id, "a domain change keeps partial_id"
    due, *_later = releases(after, view, Seeded(1), 2)  # raised MisuseError at eef0687
    assert due.end_ms == NOW + 10_000  # the window both partials were closed in
    assert [row["group"] for row in due.rows] == [{"os": "ios"}, {"os": "linux"}]

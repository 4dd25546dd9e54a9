"""The ledger's suppression rate in ``privstream estimate``: from the topic's count headers."""

from __future__ import annotations

import json
from dataclasses import dataclass

import yaml
from privstream.config import parse_config
from privstream.estimate import Options, StreamAggregate, build_report, render_table
from privstream.estimate.source import CONFIG_HEADER
from privstream.estimate.suppression import COUNTS_HEADER, parse_counts, render, summary
from privstream.kinds import build_plan

from tests.unit.cli.test_estimate import CONFIG, FakeConsumer, _run_read


@dataclass
class _Message:
    offset: int
    value: bytes | None
    headers: list[tuple[str, bytes]]
    partition: int


def counts(released: int, **reasons: int) -> bytes:
    return json.dumps({"released": released, **reasons}).encode()


def test_the_last_header_of_each_partition_holds_its_totals() -> None:
    def message(p: int, offset: int, header: bytes | None) -> _Message:
        headers = [(CONFIG_HEADER, b"abc")]
        if header is not None:
            headers.append((COUNTS_HEADER, header))
        return _Message(offset, b"{}", headers, p)

    data = {
        0: [message(0, 0, counts(5, budget_exhausted=1)), message(0, 1, counts(9, late_record=3))],
        # the worker names the input partition: two inputs may share an output partition
        1: [
            message(1, 0, json.dumps({"released": 2, "partition": 7}).encode()),
            message(1, 1, json.dumps({"released": 1, "partition": 8}).encode()),
            message(1, 2, b"not json"),
        ],
    }
    read, got, _ = _run_read(FakeConsumer("clean", data, end={0: 2, 1: 3}), "clean", "abc")
    assert len(got) == 5
    assert read.ledger_counts == {
        0: {"released": 9, "late_record": 3},
        7: {"released": 2},
        8: {"released": 1},
    }
    total = summary(read.ledger_counts.values())
    assert total == {
        "released": 12,
        "suppressed": 3,
        "suppression_rate": 3 / 15,
        "reasons": {"late_record": 3},
    }


def test_no_header_means_no_ledger_line() -> None:
    assert summary([]) is None and render(None) is None
    assert parse_counts(b'{"budget_exhausted": 1}') is None  # no "released": not ledger counts
    assert parse_counts(b"[1]") is None


def test_the_table_states_the_rate_and_what_it_means() -> None:
    plan = build_plan(parse_config(yaml.safe_load(CONFIG)))
    stream = StreamAggregate(plan, Options())
    ledger = summary([{"released": 750, "budget_exhausted": 200, "late_record": 50}])
    source = {"type": "topic", "topic": "clean", "partitions": 1, "ledger": ledger}
    table = render_table(build_report(stream, source, Options(), None, None))
    assert (
        "ledger: 250 of 1,000 records suppressed (25.00%: budget_exhausted 200, late_record 50); "
        "the estimates describe the admitted records" in table
    )

"""10,000 malformed messages interleaved with good ones, through one live worker.

Every bad message must land in the dead-letter topic once, raw (value, key,
headers) and with a reason; every good one must be sanitized exactly once,
byte-identical to the offline replay; the worker must survive all of it
without a restart, keep raw values out of its log and exit 0 on SIGTERM.

The messages and the fate each one deserves come from
``tests.support.fuzz_messages`` (seeded, deterministic). That
expectation is checked against the pure pipeline first (no broker), then
against what the worker actually wrote.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, cast

from aiokafka import ConsumerRecord
from privstream.config import load_config
from privstream.kinds import build_plan
from privstream.mechanisms.rng import OsEntropy
from privstream.pipeline import process_batch

from tests.support.broker import create_topics
from tests.support.faults import free_port, scrape_until
from tests.support.fuzz_messages import (
    CANARY,
    KNOWN_REASONS,
    MAX_MESSAGE_BYTES,
    PRIVACY,
    Case,
    fuzz_cases,
    good_cases,
    interleave,
)
from tests.support.worker_proc import (
    TEST_SECRET,
    Collector,
    Message,
    WorkerProcess,
    produce,
    raw_in_log,
    read_all,
    replay_expected,
    started,
    unique_topics,
    wait_while_alive,
    write_config,
)

GOOD = 5_000
BAD = 10_000
OUTPUT_HEADERS = {
    "privstream-config-sha256",
    "privstream-release-sha256",
    "privstream-field-releases",
    "privstream-epsilon",
    "privstream-delta",
}
DEAD_HEADERS = ["privstream-reason", "privstream-detail", "privstream-source"]


def all_cases() -> list[Case]:
    return interleave(good_cases(GOOD), fuzz_cases(BAD))


def strict_json(raw: bytes) -> Any:
    """Parse as RFC 8259 JSON: NaN/Infinity refused, every number finite."""

    def refuse(token: str) -> None:
        raise ValueError(f"non-standard token {token}")

    value = json.loads(raw, parse_constant=refuse)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            assert math.isfinite(item)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return value


def canonical(value: Any) -> str:
    """A hashable spelling of any JSON value (public fields may hold lists and objects)."""
    return json.dumps(value, sort_keys=True)


def _short_int(token: str) -> int | str:
    """An integer, or the token of one too long to convert (a good record may hold one in a
    noised field: it is clamped, issue 29); ``seq`` is never one in a good record."""
    return int(token) if len(token) <= 4000 else token


def test_expectations_agree_with_the_pipeline(tmp_path: Path) -> None:
    """No broker: each case's own expectation against the pure batch transform."""
    cases = all_cases()
    assert sum(not c.good for c in cases) == BAD
    assert sum(c.good for c in cases) > GOOD  # some fuzzed messages are valid records
    config = write_config(
        tmp_path / "c.yaml",
        "127.0.0.1:9",
        {"input_topic": "in", "output_topic": "out", "dead_letter_topic": "dlq"},
        PRIVACY,
    )
    plan = build_plan(load_config(config))
    result = process_batch(plan, [c.value or b"" for c in cases], OsEntropy())
    reasons = {d.index: d.reason for d in result.dead_letters}
    wrong = Counter(
        (case.kind, tuple(sorted(case.reasons)), reasons.get(i))
        for i, case in enumerate(cases)
        if (reasons.get(i) is None) != case.sanitizable
        or (i in reasons and reasons[i] not in case.reasons)
    )
    assert not wrong, f"(kind, expected reasons, pipeline reason): count -- {wrong}"
    assert set(reasons.values()) <= KNOWN_REASONS
    for detail in (d.detail for d in result.dead_letters):
        assert CANARY not in detail
    for out in result.outputs:
        strict_json(out)
        assert CANARY.encode() not in out


def headers_of(record: ConsumerRecord) -> list[tuple[str, bytes]]:
    return list(record.headers or ())


async def test_ten_thousand_malformed_messages(kafka_bootstrap: str, tmp_path: Path) -> None:
    kafka = unique_topics("fuzz")
    await create_topics(kafka_bootstrap, [kafka["input_topic"]], partitions=4)
    await create_topics(kafka_bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 2)
    port = free_port()
    config = write_config(
        tmp_path / "config.yaml",
        kafka_bootstrap,
        {**kafka, "transactions": True, "max_message_bytes": MAX_MESSAGE_BYTES},
        {
            **PRIVACY,
            "http": {"host": "127.0.0.1", "port": port},
            # off by default (a count by reason shows value-dependent rejections)
            "metrics": {"dead_letter_reasons": True},
        },
    )
    cases = all_cases()
    good = [i for i, c in enumerate(cases) if c.good]
    bad = [i for i, c in enumerate(cases) if not c.good]

    # a tombstone's value is None: aiokafka sends it as a null value
    messages = [(c.key, cast(bytes, c.value), c.headers) for c in cases]
    coords = await produce(kafka_bootstrap, kafka["input_topic"], cast(list[Message], messages))
    with warnings.catch_warnings():
        # numpy floating-point warnings of the oracle are checked by the pure test above
        warnings.simplefilter("ignore", RuntimeWarning)
        oracle = replay_expected(
            config, TEST_SECRET, kafka["input_topic"], coords, [c.value or b"" for c in cases]
        )
    disagree = Counter(
        cases[i].kind for i in range(len(cases)) if (oracle[i] is not None) != cases[i].sanitizable
    )
    assert not disagree, f"the oracle disagrees with the fuzz expectations: {disagree}"

    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with started(worker) as pid:
        async with (
            Collector(kafka_bootstrap, kafka["output_topic"]) as out,
            Collector(kafka_bootstrap, kafka["dead_letter_topic"]) as dead_seen,
        ):
            await wait_while_alive(out, len(good), worker, within_s=300)
            await wait_while_alive(dead_seen, len(bad), worker, within_s=120)
        metrics = await scrape_until(
            port,
            lambda m: m.get(("privstream_records_in_total", ())) == len(cases),
            within_s=30,
            every_s=0.1,
        )
        # the very process started above, never restarted
        assert worker.alive and worker.proc is not None and worker.proc.pid == pid, (
            worker.log_text()[-5000:]
        )
        assert await worker.terminate() == 0, worker.log_text()[-5000:]

    sanitized = await read_all(kafka_bootstrap, kafka["output_topic"], partitions=2)
    dead = await read_all(kafka_bootstrap, kafka["dead_letter_topic"], partitions=2)

    # good ones: each sanitized exactly once, byte-identical to the replay
    assert len(sanitized) == len(good)
    assert Counter(r.value for r in sanitized) == Counter(oracle[i] for i in good)
    bodies = [strict_json(r.value) for r in sanitized]
    # independently of the oracle: the public seq of every good input comes out once
    assert Counter(canonical(b["seq"]) for b in bodies) == Counter(
        canonical(json.loads(cast(bytes, cases[i].value), parse_int=_short_int)["seq"])
        for i in good
    )
    for record in sanitized:
        assert record.key is None
        assert {k for k, _ in headers_of(record)} == OUTPUT_HEADERS
        assert CANARY.encode() not in record.value

    # bad ones: each in the dead-letter topic exactly once, raw, with a reason
    assert len(dead) == len(bad)
    index_of = {coord: i for i, coord in enumerate(coords)}
    sources: list[int] = []
    copied: list[bytes | None] = []
    problems: list[str] = []
    for record in dead:
        headers = headers_of(record)
        extra = dict(headers[-3:])
        topic, partition, offset = extra["privstream-source"].decode().rsplit("/", 2)
        assert topic == kafka["input_topic"]
        i = index_of[(int(partition), int(offset))]
        sources.append(i)
        case = cases[i]
        reason = extra["privstream-reason"].decode()
        detail = extra["privstream-detail"].decode()
        if reason not in case.reasons or reason not in KNOWN_REASONS:
            problems.append(f"{case.kind}: reason {reason} ({detail}), expected {case.reasons}")
        assert [k for k, _ in headers[-3:]] == DEAD_HEADERS, headers
        assert headers[:-3] == case.headers  # the raw headers, kept in order
        assert record.key == case.key
        if case.raw_too_large:  # not copied (None or empty): the source header points to it
            assert not record.value, case.kind
        else:
            assert record.value == case.value, case.kind
            copied.append(record.value)
        assert detail and CANARY not in detail
    assert not problems, "\n".join(problems[:50])
    assert sorted(sources) == bad
    assert Counter(copied) == Counter(cases[i].value for i in bad if not cases[i].raw_too_large)

    # the worker never restarted a session, and its counters agree with the topics
    assert metrics[("privstream_records_in_total", ())] == len(cases)
    assert metrics[("privstream_records_out_total", ())] == len(good)
    assert metrics.get(("privstream_transactions_total", (("outcome", "aborted"),)), 0) == 0
    by_reason = Counter(extra_reason(r) for r in dead)
    for reason, count in by_reason.items():
        key = ("privstream_records_dead_lettered_total", (("reason", reason),))
        assert metrics[key] == count

    log = worker.log_text()
    leaks = raw_in_log(log)
    assert not leaks, f"{len(leaks)} log lines hold raw data, e.g.:\n" + "\n".join(leaks[:5])
    assert "Traceback" not in log
    assert "session ended" not in log  # no reconnect: the broker never went away


def extra_reason(record: ConsumerRecord) -> str:
    return dict(headers_of(record)[-3:])["privstream-reason"].decode()

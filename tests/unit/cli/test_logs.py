"""The worker's log setup: aiokafka's transient coordinator ERROR is said at INFO;
JSON lines; the Kafka client's lines folded into the worker's and rate-limited."""

from __future__ import annotations

import json
import logging
import sys

import pytest
from aiokafka.errors import KafkaConnectionError, NodeNotReadyError, UnknownMemberIdError
from privstream.cli.logs import JSON_KEYS, JsonLines
from privstream.cli.logs import transient_coordinator as _transient_coordinator
from privstream.worker.client_logs import WINDOW_S, ClientLogFold, Reachability, lost_broker

NAME = "aiokafka.consumer.group_coordinator"


def record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord(NAME, level, __file__, 1, message, None, None)


@pytest.fixture
def at_level() -> object:
    logger = logging.getLogger(NAME)
    before = logger.level
    yield logger
    logger.setLevel(before)


def test_coordinator_not_available_is_demoted_to_info(at_level: logging.Logger) -> None:
    at_level.setLevel(logging.INFO)
    seen = record(
        logging.ERROR,
        "Group Coordinator Request failed: [Error 15] GroupCoordinatorNotAvailableError",
    )
    assert _transient_coordinator(seen)
    assert (seen.levelno, seen.levelname) == (logging.INFO, "INFO")
    # and dropped when the logger shows WARNING and above only
    at_level.setLevel(logging.WARNING)
    quiet = record(logging.ERROR, "GroupCoordinatorNotAvailableError")
    assert not _transient_coordinator(quiet)


def test_other_errors_keep_their_level(at_level: logging.Logger) -> None:
    at_level.setLevel(logging.WARNING)
    other = record(logging.ERROR, "Error sending JoinGroupRequest: NotCoordinatorError")
    assert _transient_coordinator(other)
    assert other.levelno == logging.ERROR


def test_session_end_names_the_error_once() -> None:
    from aiokafka.errors import KafkaConnectionError
    from privstream.worker.loop import describe

    assert describe(KafkaConnectionError("Unable to bootstrap")) == (
        "KafkaConnectionError: Unable to bootstrap"
    )
    assert describe(OSError("refused")) == "OSError: refused"
    assert describe(TimeoutError()) == "TimeoutError"


def client(message: str, name: str = "aiokafka.client", *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, logging.ERROR, __file__, 1, message, args, None)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_client_lines_are_rate_limited_per_template_and_counted() -> None:
    clock = Clock()
    fold = ClientLogFold(clock)
    assert fold.filter(client('Unable connect to "%s": %s', "aiokafka.client", "h:1", "refused"))
    for _ in range(5):  # the same template, other arguments: held back
        assert not fold.filter(client('Unable connect to "%s": %s', "aiokafka.client", "h:2", "x"))
    assert fold.filter(client("Failed fetch messages from %s", "aiokafka.consumer.fetcher", 1))
    own = logging.LogRecord("privstream.worker", logging.INFO, __file__, 1, "mine", None, None)
    assert all(fold.filter(own) for _ in range(3))  # the worker's own lines: never held
    clock.now += WINDOW_S
    again = client('Unable connect to "%s": %s', "aiokafka.client", "h:1", "refused")
    assert fold.filter(again)
    assert again.getMessage() == (
        'Unable connect to "h:1": refused (5 more like it held back in the last 60 s)'
    )


def test_an_outage_holds_every_client_line_and_says_how_many_when_it_ends() -> None:
    clock = Clock()
    fold = ClientLogFold(clock)
    records: list[logging.LogRecord] = []
    logger = logging.getLogger("test.reachability")
    logger.propagate = False
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        reach = Reachability(logger, fold)
        reach.reachable()  # the first contact: INFO
        reach.unreachable("Kafka session ended (KafkaConnectionError); reconnecting in 0.5 s")
        for attempt in range(40):
            assert not fold.filter(client(f"Unable to update metadata {attempt}"))
            reach.unreachable("Kafka session ended (KafkaConnectionError); reconnecting in 1 s")
        clock.now += 34.25
        reach.reachable()
        reach.reachable()  # no second "again"
    finally:
        logger.removeHandler(handler)
    warnings = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("broker unreachable: Kafka session ended")
    assert warnings[1].startswith("broker reachable again after 34.2 s unreachable (40 Kafka")
    assert [r.levelno for r in records].count(logging.INFO) == 1 + 40
    assert fold.filter(client("Unable to update metadata 0"))  # after the outage: let through


def test_json_lines_have_stable_keys_and_one_line_each() -> None:
    formatter = JsonLines()
    plain = logging.LogRecord(
        "privstream.worker", logging.WARNING, __file__, 1, "a %s", ("b",), None
    )
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord(
            "privstream", logging.ERROR, __file__, 1, "failed", None, sys.exc_info()
        )
    for record in (plain, failed):
        line = formatter.format(record)
        assert "\n" not in line  # a traceback's newlines are escaped: one line per record
        parsed = json.loads(line)
        assert tuple(parsed) == JSON_KEYS
        assert parsed["ts"].endswith("Z") and len(parsed["ts"]) == len("2026-01-01T00:00:00.000Z")
    assert json.loads(formatter.format(plain))["message"] == "a b"
    assert json.loads(formatter.format(plain))["level"] == "WARNING"
    message = json.loads(formatter.format(failed))["message"]
    assert message.startswith("failed\nTraceback") and "ValueError: boom" in message


def test_only_a_broker_that_stopped_answering_is_an_outage() -> None:
    """A session ending with the group's refusal after an outage (the session expired while
    the broker was away) is no second outage: found as a flaky second "broker unreachable"
    WARNING in tests/integration/test_outage_logs.py."""
    assert lost_broker(KafkaConnectionError("Connection at 127.0.0.1:9092 closed"))
    assert lost_broker(NodeNotReadyError("node 1"))
    assert lost_broker(ConnectionResetError())
    assert not lost_broker(UnknownMemberIdError("generation 1"))
    assert not lost_broker(ValueError("no"))
    try:
        try:
            raise KafkaConnectionError("closed")
        except KafkaConnectionError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert lost_broker(outer)

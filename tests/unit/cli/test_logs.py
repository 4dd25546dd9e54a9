"""The worker's log setup: aiokafka's transient coordinator ERROR is said at INFO."""

from __future__ import annotations

import logging

import pytest
from privstream.cli.logs import transient_coordinator as _transient_coordinator

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


def test_unable_to_connect_is_said_once_per_address() -> None:
    from privstream.cli.logs import OnceFilter

    once = OnceFilter()
    first = logging.LogRecord(
        "aiokafka", logging.ERROR, __file__, 1, 'Unable connect to "h:1": refused', None, None
    )
    again = logging.LogRecord(
        "aiokafka", logging.ERROR, __file__, 1, 'Unable connect to "h:1": refused', None, None
    )
    other = logging.LogRecord(
        "aiokafka", logging.ERROR, __file__, 1, 'Unable connect to "h:2": refused', None, None
    )
    unrelated = logging.LogRecord("aiokafka", logging.ERROR, __file__, 1, "boom", None, None)
    assert once.filter(first) and first.levelname == "WARNING"
    assert not once.filter(again)
    assert once.filter(other)
    assert once.filter(unrelated) and unrelated.levelno == logging.ERROR


def test_session_end_names_the_error_once() -> None:
    from aiokafka.errors import KafkaConnectionError
    from privstream.worker.loop import describe

    assert describe(KafkaConnectionError("Unable to bootstrap")) == (
        "KafkaConnectionError: Unable to bootstrap"
    )
    assert describe(OSError("refused")) == "OSError: refused"
    assert describe(TimeoutError()) == "TimeoutError"

"""The worker's log setup: aiokafka's transient coordinator ERROR is said at INFO."""

from __future__ import annotations

import logging

import pytest

from service.cli.main import _transient_coordinator

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

"""Log hygiene for `privstream run`: aiokafka's transient and repeated errors, said once.

Imported by ``run`` only (the other commands start without ``logging``).
"""

from __future__ import annotations

import logging


def transient_coordinator(record: logging.LogRecord) -> bool:
    """aiokafka logs ERROR while a fresh broker elects the group coordinator, then retries
    by itself: say it at INFO (a coordinator that never comes shows as no progress)."""
    if record.levelno >= logging.ERROR and "GroupCoordinatorNotAvailable" in record.getMessage():
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)
    return True


class OnceFilter(logging.Filter):
    """aiokafka's "Unable connect to" ERROR, said once per broker address and process,
    as a WARNING: the worker's own WARNING names every reconnect attempt, so the low-level
    cause (refused, unreachable, ...) is said once instead of on every retry."""

    _LIMIT = 256

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith("Unable connect to"):
            return True
        address = message.partition('": ')[0]  # up to the end of "host:port"
        if address in self._seen:
            return False
        if len(self._seen) < self._LIMIT:
            self._seen.add(address)
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True

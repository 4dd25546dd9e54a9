"""Log set-up for `privstream run`: text or JSON lines, aiokafka's noise folded or demoted.

Imported by ``run`` only (the other commands start without ``logging``).
"""

from __future__ import annotations

import json
import logging
import sys
import time

from privstream.worker.client_logs import FOLD

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
#: every JSON line has exactly these keys, in this order
JSON_KEYS = ("ts", "level", "logger", "message")


class JsonLines(logging.Formatter):
    """One JSON object per line with ``JSON_KEYS``: the time (UTC, ISO 8601, ms), the level,
    the logger and the message (a traceback, if any, appended to it after a newline)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message = f"{message}\n{self.formatException(record.exc_info)}"
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        values = (f"{stamp}.{int(record.msecs):03d}Z", record.levelname, record.name, message)
        return json.dumps(dict(zip(JSON_KEYS, values, strict=True)), ensure_ascii=False)


def configure(level: str, log_format: str) -> None:
    """The root handler on stderr in ``log_format`` ("text" or "json"), with the fold."""
    handler = logging.StreamHandler(sys.stderr)
    formatter = JsonLines() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    handler.addFilter(FOLD)  # the Kafka client's lines: held during outages, rate-limited
    logging.basicConfig(level=level, handlers=[handler])
    # aiokafka's DEBUG lines print the first bytes of every fetched and produced
    # batch (raw keys and values) and the SCRAM exchange: never below INFO
    logging.getLogger("aiokafka").setLevel(max(logging.INFO, logging.getLevelName(level)))
    logging.getLogger("aiokafka.consumer.group_coordinator").addFilter(transient_coordinator)


def transient_coordinator(record: logging.LogRecord) -> bool:
    """aiokafka logs ERROR while a fresh broker elects the group coordinator, then retries
    by itself: say it at INFO (a coordinator that never comes shows as no progress)."""
    if record.levelno >= logging.ERROR and "GroupCoordinatorNotAvailable" in record.getMessage():
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)
    return True

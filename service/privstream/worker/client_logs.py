"""The Kafka client's (aiokafka's) log lines: folded into the worker's own, and rate-limited.

aiokafka logs an ERROR for every failed connection, metadata update, fetch
and heartbeat: a 34 s broker outage made about 1,030 of them, while the
worker's own account of it is two lines (``Worker``: one WARNING when the
broker becomes unreachable, one when it answers again, with the outage's
duration). ``FOLD`` is a filter on the process's log handler (``cli``
installs it) that:

* while the worker says the broker is unreachable (``down`` .. ``up``),
  holds back every aiokafka line and counts it; the worker's "reachable
  again" line says how many;
* otherwise lets each aiokafka message template through at most once per
  ``WINDOW_S`` per logger, and says on the next one let through how many
  like it were held back.

aiokafka logs raw keys and values only at DEBUG (never enabled, ``cli``);
nothing here adds a value to a line.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

from aiokafka import errors as aiokafka_errors

#: a message template of the Kafka client at most once per this many seconds
WINDOW_S = 60.0
#: templates remembered (aiokafka has a few hundred; the oldest is forgotten first)
MAX_TEMPLATES = 512


class ClientLogFold(logging.Filter):
    """Holds the Kafka client's lines back during an outage; rate-limits them otherwise."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._down_since: float | None = None
        self._folded = 0
        self._passed: dict[tuple[str, str], float] = {}  # template -> when it last passed
        self._held: Counter[tuple[str, str]] = Counter()

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("aiokafka"):
            return True
        if self._down_since is not None:
            self._folded += 1
            return False
        key, now = (record.name, str(record.msg)), self._clock()
        last = self._passed.get(key)
        if last is not None and now - last < WINDOW_S:
            self._held[key] += 1
            return False
        self._passed.pop(key, None)  # re-inserted last: the oldest template is first
        self._passed[key] = now
        if len(self._passed) > MAX_TEMPLATES:
            self._held.pop(next(iter(self._passed)), None)
            del self._passed[next(iter(self._passed))]
        held = self._held.pop(key, 0)
        if held and isinstance(record.msg, str):
            record.msg += f" ({held} more like it held back in the last {WINDOW_S:.0f} s)"
        return True

    def down(self) -> None:
        """The worker has said the broker is unreachable: hold the client's lines back."""
        if self._down_since is None:
            self._down_since, self._folded = self._clock(), 0

    def up(self) -> tuple[float, int]:
        """The broker answers again: (seconds it was down, client lines held back)."""
        if self._down_since is None:
            return 0.0, 0
        down_s, folded = self._clock() - self._down_since, self._folded
        self._down_since, self._folded = None, 0
        return down_s, folded


#: what a session ends with when the broker stopped answering (not: the broker answered and
#: refused, e.g. a group that forgot this member during an outage: ``UnknownMemberIdError``)
_LOST = (
    aiokafka_errors.KafkaConnectionError,
    aiokafka_errors.NodeNotReadyError,
    aiokafka_errors.RequestTimedOutError,
    aiokafka_errors.KafkaTimeoutError,
    aiokafka_errors.NoBrokersAvailable,
    OSError,  # TimeoutError and ConnectionError among them
)


def lost_broker(exc: BaseException) -> bool:
    """Whether a session ended because no broker answered (``exc`` or what it wraps)."""
    seen: BaseException | None = exc
    for _ in range(8):  # a chain of causes, bounded
        if seen is None:
            return False
        if isinstance(seen, _LOST):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


#: the one fold of the process: the worker reports to it, ``cli`` puts it on the handler
FOLD = ClientLogFold()


class Reachability:
    """The worker's account of the broker: one WARNING when it stops answering (or a
    session ends), one when it answers again with the outage's duration; in between,
    reconnect attempts at INFO, the probe's misses at DEBUG, the Kafka client's lines
    held back by ``fold``."""

    def __init__(self, logger: logging.Logger, fold: ClientLogFold = FOLD) -> None:
        self._log = logger
        self._fold = fold
        self._out = False  # an outage said and not yet over
        self._reached = False  # the broker has answered at least once

    def unreachable(self, cause: str, again: int = logging.INFO) -> None:
        """Say the outage once; ``cause`` again at level ``again`` while it lasts."""
        if self._out:
            self._log.log(again, "broker still unreachable: %s", cause)
            return
        self._out = True
        self._fold.down()
        self._log.warning(
            "broker unreachable: %s (reconnect attempts follow at INFO, the Kafka client's "
            "own messages are held back; one WARNING more when it answers again)",
            cause,
        )

    def reachable(self) -> None:
        if self._out:
            self._out = False
            down_s, folded = self._fold.up()
            self._log.warning(
                "broker reachable again after %.1f s unreachable (%d Kafka client messages "
                "held back meanwhile)",
                down_s,
                folded,
            )
        elif not self._reached:
            self._log.info("broker reachable")
        self._reached = True

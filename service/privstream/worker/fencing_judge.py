"""What a fencing is judged by: the producer's age, the failed transaction's age and
whether the broker went away meanwhile, on one injected clock.

The loop reports what happens (a producer started, a transaction began or
failed, the probe went unanswered); when a session ends, ``judge`` turns the
error into a ``clients.Fencing``, which tells an expiry during an outage
(restart the producer) from a rival (stop). The evidence is taken when the
transaction fails, before the session closes every connection: a connection
closed on the way out is no outage.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from privstream.worker.clients import Fencing, is_fenced, live_connections


@dataclass(frozen=True)
class Transaction:
    """An open transaction, as ``FencingJudge.began`` saw it start."""

    #: the producer's broker connections up when it began (one dropping is an outage)
    links: tuple[Any, ...]
    began: float


class FencingJudge:
    """The timers behind a fencing verdict; ``clock`` is in seconds (``time.monotonic``)."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._timeout_s = timeout_s
        self._clock = clock
        self._producer_client: Any = None
        self._producer_since = 0.0
        self._txn_age_s: float | None = None  # of the transaction that failed, if one did
        self._txn_outage = False  # a connection dropped or the probe failed since it began
        self._unreachable_at = float("-inf")
        self._fenced_before = False

    @property
    def unreachable_at(self) -> float:
        """When the probe last went unanswered (``-inf``: never)."""
        return self._unreachable_at

    def session_started(self) -> None:
        """A new session has no failed transaction yet."""
        self._txn_age_s = None

    def producer_started(self, client: Any) -> None:
        """The session's producer is up; ``client`` is its aiokafka client."""
        self._producer_since, self._producer_client = self._clock(), client

    def unreachable(self) -> None:
        """The readiness probe went unanswered: outage evidence for an open transaction."""
        self._unreachable_at = self._clock()

    def began(self) -> Transaction:
        """A transaction is about to begin."""
        return Transaction(live_connections(self._producer_client), self._clock())

    def failed(self, txn: Transaction) -> None:
        """``txn`` failed: judged now, before the session closes every connection."""
        self._txn_age_s = self._clock() - txn.began
        dropped = any(not conn.connected() for conn in txn.links)
        self._txn_outage = dropped or self._unreachable_at >= txn.began

    def judge(self, exc: BaseException) -> Fencing | None:
        """What this session saw, if ``exc`` is a fencing; None otherwise.

        Remembered for the next session's verdict: a fresh producer fenced again
        soon after is a rival's sign.
        """
        fencing = self._fencing(exc)
        self._fenced_before = fencing is not None
        return fencing

    def _fencing(self, exc: BaseException) -> Fencing | None:
        if not is_fenced(exc):
            return None
        producer_age = self._clock() - self._producer_since
        return Fencing(
            transaction_age_s=self._txn_age_s,
            timeout_s=self._timeout_s,
            connection_lost=self._txn_outage,
            refenced_after_s=producer_age if self._fenced_before else None,
            producer_age_s=producer_age,
        )

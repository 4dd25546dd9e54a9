"""The time a replica charges at, checked against the broker's clock.

A partition's changelog clock is the largest time any replica charged it at,
and the closed past only moves forward (``privstream.ledger.codec``): one
replica whose clock runs a month fast, committing one batch, closes every
open window on every replica for a month. So no charge made more than
``bound_ms`` (``privacy.ledger.max_future``) ahead of the broker's clock is
ever committed:

* the changelog topic has ``message.timestamp.type=LogAppendTime``
  (``topics``), so the broker stamps every changelog record with its own
  clock as it appends it, and the produce answer carries that time;
* after a batch's changelog records are acknowledged, and before its
  transaction commits, ``confirm`` compares the time the batch was charged
  at with the earliest append time: the charge was taken before any append,
  so ``charged - appended`` is at most how far this clock was ahead of the
  broker's (network delay only hides skew, never invents it). Past the
  bound it raises ``ClockAheadError`` and the transaction is aborted: its
  clock, closed past and tombstones never reach the changelog;
* before a batch is charged, ``check`` refuses at once if the last append
  time plus the monotonic time since says this clock is ahead by more than
  the bound plus ``ESTIMATE_SLACK_MS`` (the estimate's own error: the time
  between an append and its acknowledgement, and drift since): a clock that
  jumps mid-session (an NTP step, a resumed VM) is caught before it charges
  anything, with or without transactions.

A replica that refuses says so (WARNING, ``privstream_clock_refusals_total``,
``/readyz`` 503) and retries; it charges again, by itself, once its clock is
back within the bound. Nothing else has to be reset.

``OFFSET_ENV`` shifts this replica's clock by that many milliseconds: a fault
injection for tests (a fast clock without root or libfaketime), warned about
at start.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from privstream.errors import ClockAheadError, ConfigError

log = logging.getLogger("privstream.worker")

#: the fault-injection hook: milliseconds added to this replica's wall clock
OFFSET_ENV = "PRIVSTREAM_FAULT_CLOCK_OFFSET_MS"
#: the pre-charge estimate's own error (an append's acknowledgement delay, drift since)
ESTIMATE_SLACK_MS = 1_000


@dataclass
class BrokerClock:
    """This replica's wall clock, and what the broker's append times say of it."""

    #: how far ahead of the broker's clock a charge may be (``max_future``)
    bound_ms: int
    #: the fault injection (``OFFSET_ENV``); 0 in production
    offset_ms: int = 0
    #: the last broker append time seen, and ``time.monotonic()`` when it was seen
    _reference: tuple[int, float] | None = None
    #: how far ahead the last comparison found this clock (None before any)
    ahead_ms: int | None = None

    @classmethod
    def from_env(cls, bound_ms: int, environ: Mapping[str, str]) -> BrokerClock:
        text = environ.get(OFFSET_ENV, "").strip()
        if not text:
            return cls(bound_ms=bound_ms)
        try:
            offset = int(text)
        except ValueError:
            raise ConfigError([f"{OFFSET_ENV}={text!r} is not an integer (milliseconds)"]) from None
        log.warning("%s=%d: this replica's clock is shifted (fault injection)", OFFSET_ENV, offset)
        return cls(bound_ms=bound_ms, offset_ms=offset)

    @property
    def ok(self) -> bool:
        """False while the last comparison found this clock ahead by more than allowed."""
        return self.ahead_ms is None or self.ahead_ms <= self.bound_ms

    def now_ms(self) -> int:
        """The time to charge at."""
        return int(time.time() * 1000) + self.offset_ms

    def check(self, now_ms: int) -> None:
        """Before a charge at ``now_ms``: ``ClockAheadError`` if the last append time says
        this clock is ahead by more than the bound plus ``ESTIMATE_SLACK_MS``."""
        if self._reference is None:
            return
        appended, seen = self._reference
        estimate = now_ms - appended - int((time.monotonic() - seen) * 1000)
        if estimate > self.bound_ms + ESTIMATE_SLACK_MS:
            self.ahead_ms = estimate
            raise self._refusal(estimate, "estimated from the last changelog append time")
        if not self.ok and estimate <= self.bound_ms:
            self.ahead_ms = estimate  # back within the bound: charge again

    def confirm(self, charged_ms: int, appended_ms: int) -> None:
        """After a batch charged at ``charged_ms`` had its changelog records appended at
        ``appended_ms`` (the earliest), before it commits: ``ClockAheadError`` past the
        bound."""
        self._reference = appended_ms, time.monotonic()
        self.ahead_ms = charged_ms - appended_ms
        if self.ahead_ms > self.bound_ms:
            raise self._refusal(self.ahead_ms, "the broker's append time of this batch")

    def _refusal(self, ahead_ms: int, how: str) -> ClockAheadError:
        return ClockAheadError(
            f"this replica's clock is {ahead_ms / 1000:.1f} s ahead of the broker's ({how}), "
            f"more than privacy.ledger.max_future ({self.bound_ms / 1000:.1f} s): refusing to "
            "charge, since a fast clock committed to the changelog would close every open "
            "window on every replica. Fix this host's clock (NTP); the worker retries and "
            "resumes by itself"
        )

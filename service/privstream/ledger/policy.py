"""The ledger's policy: the caps and the record cost as exact integers.

Epsilon is counted in units of ``1e-9`` and delta in units of ``1e-18``
(``privstream.config.ledger``). A record's cost is rounded *up* and a cap
*down*, each exactly on the double's rational value, so the integer test
``spent + cost <= cap`` never admits a record the real-number test would
refuse: with ``m`` records admitted in a window, ``m * eps_record <= m *
cost / 1e9 <= cap / 1e9 <= eps_W`` (and the same for delta).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from privstream.config.budget import record_cost
from privstream.config.ledger import (
    DELTA_UNITS,
    EPSILON_UNITS,
    cap_units,
    cost_units,
    format_duration,
)
from privstream.errors import MisuseError

if TYPE_CHECKING:
    from privstream.config import AppConfig
    from privstream.pipeline import RecordPlan

#: why a record was not released; the order is the precedence (first that applies)
REASONS = (
    "budget_exhausted",
    "lifetime_exhausted",
    "late_record",
    "future_record",
    "subject_partition_mismatch",
    "subject_key_mismatch",
    "subject_too_long",
    "no_subject",
)
#: the longest subject the ledger charges: its changelog keys hold it whole, and a hostile
#: writer's megabyte key would otherwise make a changelog record the broker refuses (the
#: batch's transaction failing on every replay would stall the partition)
MAX_SUBJECT_BYTES = 1024


@dataclass(frozen=True, kw_only=True)
class LedgerPolicy:
    """The ledger's caps and the cost of one released record, in integer units."""

    window_ms: int
    grace_ms: int
    max_future_ms: int
    #: ceil(record epsilon * EPSILON_UNITS)
    cost_units: int
    #: ceil(record delta * DELTA_UNITS)
    delta_cost_units: int
    #: floor(cap * units)
    cap_units: int
    delta_cap_units: int
    lifetime_cap_units: int | None
    over_budget: Literal["drop", "dead_letter"]
    #: the declared caps and record cost, as the config states them (explain, headers)
    epsilon: float
    delta: float
    lifetime_epsilon: float | None
    record_epsilon: float
    record_delta: float

    def __post_init__(self) -> None:
        if self.window_ms <= 0 or self.grace_ms < 0 or self.max_future_ms < 0:
            raise MisuseError("LedgerPolicy: window_ms must be > 0, grace and max_future >= 0")
        if min(self.cost_units, self.delta_cost_units, self.cap_units, self.delta_cap_units) < 0:
            raise MisuseError("LedgerPolicy: costs and caps are non-negative integers")

    @classmethod
    def from_config(cls, config: AppConfig, plan: RecordPlan | None = None) -> LedgerPolicy:
        """The policy of ``config.privacy.ledger``.

        A record costs the plan's record-level (epsilon, delta) plus the
        clamped counts' epsilon when they are on (``record_cost``); without a
        plan, the same budget resolved from ``config``.
        """
        ledger = config.privacy.ledger
        if ledger is None:
            raise MisuseError("LedgerPolicy.from_config: the config has no privacy.ledger")
        eps, delta = record_cost(config)  # the plan's budget is resolved from the same config
        life = ledger.lifetime_epsilon
        return cls(
            window_ms=ledger.window,
            grace_ms=ledger.grace,
            max_future_ms=ledger.max_future,
            cost_units=cost_units(eps, EPSILON_UNITS),
            delta_cost_units=cost_units(delta, DELTA_UNITS),
            cap_units=cap_units(ledger.epsilon, EPSILON_UNITS),
            delta_cap_units=cap_units(ledger.delta, DELTA_UNITS),
            lifetime_cap_units=None if life is None else cap_units(life, EPSILON_UNITS),
            over_budget=ledger.over_budget,
            epsilon=ledger.epsilon,
            delta=ledger.delta,
            lifetime_epsilon=life,
            record_epsilon=float(eps),
            record_delta=float(delta),
        )

    @property
    def records_per_window(self) -> int:
        """How many records one subject can have released per window (both caps)."""
        return min(
            _fits(self.cap_units, self.cost_units),
            _fits(self.delta_cap_units, self.delta_cost_units),
        )

    @property
    def records_per_lifetime(self) -> int | None:
        if self.lifetime_cap_units is None:
            return None
        return _fits(self.lifetime_cap_units, self.cost_units)

    def guarantee_header(self) -> bytes:
        """``eps=4;delta=1e-06;window=1d[;lifetime_eps=200]``: the per-subject guarantee."""
        parts = [
            f"eps={_exact(self.epsilon)}",
            f"delta={_exact(self.delta)}",
            f"window={format_duration(self.window_ms)}",
        ]
        if self.lifetime_epsilon is not None:
            parts.append(f"lifetime_eps={_exact(self.lifetime_epsilon)}")
        return ";".join(parts).encode()


def _exact(value: float) -> str:
    """The shortest text that reads back as the same double (``:g`` would round 1.2345649
    to 1.23456, claiming less than is enforced)."""
    return repr(value).removesuffix(".0")


#: "no limit" for a cap whose record cost is zero (a bound on any batch's length)
UNLIMITED = 2**62


def _fits(cap: int, cost: int) -> int:
    return UNLIMITED if cost == 0 else cap // cost

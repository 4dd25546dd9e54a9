"""Contributions to aggregate windows, charged to the subject ledger beside its records.

A subject's records in window ``w`` of aggregate ``a`` and ledger window ``W`` are one
*contribution* ``(s, a, w, W)``. At the first record of it that passes the ledger's
screen, the contribution is decided once: admitted, and charged
``(2 eps_a, (1 + e^eps_a) delta_a)`` to ``spent(s, W)``, iff that fits the caps; the
record's own release is decided after, against the same spending. Records of a
contribution not admitted (or never decided) enter no aggregate. Every decision reads
the subject's own earlier charges and the record's timestamp, never a value.

``JointLedger`` is the sequential decision core, one record at a time in offset order
(the reference a batched path must match, as ``tests/unit/ledger/test_charge.py``
holds ``SubjectLedger`` to charging one record at a time). It takes records the ledger's
screen passed (``SubjectLedger._screen``); the screen itself is not repeated here.
Proof and the exactly-once contract: docs/proofs/ledger-aggregates.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from privstream.config.aggregates import aggregate_charge, exact_charge
from privstream.config.ledger import DELTA_UNITS, EPSILON_UNITS, cost_units
from privstream.errors import MisuseError
from privstream.ledger.policy import LedgerPolicy

if TYPE_CHECKING:
    from privstream.config import AppConfig
    from privstream.config.aggregates import AggregateConfig

MS = 1000
#: (subject, aggregate index, aggregate window start, ledger window start)
Contribution = tuple[bytes, int, int, int]


@dataclass(frozen=True)
class AggregateCost:
    """What one contribution to an aggregate's window costs its subject, in ledger units."""

    name: str
    window_ms: int
    #: ceil(2 eps_a * EPSILON_UNITS): a changed subject is a removal and an addition
    cost_units: int
    #: ceil((1 + e^eps_a) delta_a * DELTA_UNITS) on an upper bound of the real value
    #: (``exact_charge``: ``e^eps_a`` bounded from above, not a double's rounding)
    delta_cost_units: int
    #: the charge as the config states it (explain)
    epsilon: float
    delta: float
    #: the plan's ``AggregatePlan.partial_id`` (ASCII): what a decision row is keyed by, so
    #: a plan whose epsilon or bounds change is decided (and charged) anew
    partial_id: bytes = b""
    #: the aggregate's ``window.grace_seconds``: a decision is kept past its window's end
    #: by this much, for the aggregate stream to read it
    grace_ms: int = 0

    @classmethod
    def of(cls, spec: AggregateConfig, partial_id: str = "") -> AggregateCost:
        """The cost of ``spec``'s contributions (``aggregate_charge`` of the one aggregate),
        decided under the plan ``partial_id`` (``AggregatePlan.partial_id``; the record path
        gives it, ``explain`` needs none)."""
        if spec.window is None:
            raise MisuseError(
                f"aggregate {spec.name!r} has no window: a ledger charges per window; give "
                "window: {size_seconds: 3600}"
            )
        eps, delta = aggregate_charge([spec])
        exact_eps, exact_delta = exact_charge(spec)  # rounded up on the real cost
        return cls(
            name=spec.name,
            window_ms=spec.window.size_seconds * MS,
            cost_units=cost_units(exact_eps, EPSILON_UNITS),
            delta_cost_units=cost_units(exact_delta, DELTA_UNITS),
            epsilon=eps,
            delta=delta,
            partial_id=partial_id.encode("ascii"),
            grace_ms=spec.window.grace_seconds * MS,
        )

    def windows_per(self, ledger_window_ms: int) -> int:
        """The most windows of this aggregate that meet one ledger window (both grids start
        at the epoch): ``ceil``-like, plus one when the grids are offset."""
        step = math.gcd(self.window_ms, ledger_window_ms)
        return (self.window_ms - step + ledger_window_ms - 1) // self.window_ms + 1


def aggregate_costs(config: AppConfig) -> tuple[AggregateCost, ...]:
    """The cost of each of ``config``'s aggregates, in config order."""
    return tuple(AggregateCost.of(spec) for spec in config.aggregates)


@dataclass(frozen=True)
class Verdict:
    """One screened record's decisions."""

    #: the record's own release
    released: bool
    #: per aggregate, in config order: whether the record's contribution is admitted
    contributes: tuple[bool, ...]


@dataclass
class JointLedger:
    """One partition's spending per (subject, ledger window), records and contributions
    together, and each contribution's decision; see the module docstring."""

    policy: LedgerPolicy
    costs: Sequence[AggregateCost]
    #: (subject, ledger window start) -> [epsilon units, delta units] spent
    spent: dict[tuple[bytes, int], list[int]] = field(default_factory=dict)
    #: subject -> epsilon units spent ever (kept only under a lifetime cap)
    lifetime: dict[bytes, int] = field(default_factory=dict)
    #: every contribution decided: admitted or not, never revisited
    decided: dict[Contribution, bool] = field(default_factory=dict)

    def admit(self, subject: bytes, ledger_ms: int, aggregate_ms: int | Sequence[int]) -> Verdict:
        """Decide a screened record: its undecided contributions first, in config order,
        then its release, each against what ``subject`` spent in the record's ledger window.

        ``ledger_ms`` places the record in a ledger window (its Kafka timestamp, or its
        ``privacy.ledger.time``), ``aggregate_ms`` in each aggregate's windows (the time
        the aggregate stream reads: the Kafka timestamp, or the aggregate's
        ``window.time``): one per aggregate, or one for all."""
        times = self._times(aggregate_ms)
        ledger_window = self._ledger_window(ledger_ms)
        for index, cost in enumerate(self.costs):
            key = self._contribution(subject, index, times[index], ledger_window)
            if key not in self.decided:
                units = (cost.cost_units, cost.delta_cost_units)
                self.decided[key] = self._charge(subject, ledger_window, units)
        record = (self.policy.cost_units, self.policy.delta_cost_units)
        released = self._charge(subject, ledger_window, record)
        joined = (self.contributes(subject, i, ledger_ms, times[i]) for i in self._indices)
        return Verdict(released=released, contributes=tuple(joined))

    def contributes(
        self, subject: bytes, aggregate: int, ledger_ms: int, aggregate_ms: int
    ) -> bool:
        """Whether a record of ``subject`` (times as ``admit`` takes them) enters its window
        of aggregate ``aggregate``: only if its contribution was admitted (undecided: no)."""
        ledger_window = self._ledger_window(ledger_ms)
        key = self._contribution(subject, aggregate, aggregate_ms, ledger_window)
        return self.decided.get(key, False)

    @property
    def _indices(self) -> range:
        return range(len(self.costs))

    def _times(self, aggregate_ms: int | Sequence[int]) -> Sequence[int]:
        if isinstance(aggregate_ms, int):
            return [aggregate_ms] * len(self.costs)
        if len(aggregate_ms) != len(self.costs):
            raise MisuseError(
                f"admit: {len(aggregate_ms)} aggregate times for {len(self.costs)} "
                "aggregates; give one per aggregate, in config order, or one for all"
            )
        return aggregate_ms

    def _charge(self, subject: bytes, ledger_window: int, units: tuple[int, int]) -> bool:
        """Add ``units`` to the subject's window (and lifetime) iff every cap still holds."""
        policy = self.policy
        spent = self.spent.setdefault((subject, ledger_window), [0, 0])
        fits = (
            spent[0] + units[0] <= policy.cap_units
            and spent[1] + units[1] <= policy.delta_cap_units
        )
        life_cap = policy.lifetime_cap_units
        if life_cap is not None:
            fits = fits and self.lifetime.get(subject, 0) + units[0] <= life_cap
        if fits:
            spent[0] += units[0]
            spent[1] += units[1]
            if life_cap is not None:
                self.lifetime[subject] = self.lifetime.get(subject, 0) + units[0]
        return fits

    def _ledger_window(self, timestamp_ms: int) -> int:
        return timestamp_ms - timestamp_ms % self.policy.window_ms  # as SubjectLedger._screen

    def _contribution(
        self, subject: bytes, aggregate: int, timestamp_ms: int, ledger_window: int
    ) -> Contribution:
        size = self.costs[aggregate].window_ms
        return (subject, aggregate, timestamp_ms - timestamp_ms % size, ledger_window)

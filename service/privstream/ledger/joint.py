"""A batch's records decided with their aggregate contributions, one record at a time.

With aggregates, a record's first contribution to a window is charged before the record
(docs/proofs/ledger-aggregates.md, "The decision"), and the two costs differ: the
allowance arithmetic of ``core`` (every charge the same) does not apply, so the records
the screen passed are decided here in offset order, as ``aggregate_charges.JointLedger``
decides them (``tests/unit/ledger/test_joint_charge.py`` holds this to it). ``core``
gathers the spent rows before and writes the changed ones after.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from privstream.ledger import codec
from privstream.ledger.aggregate_charges import AggregateCost
from privstream.ledger.decisions import Decisions
from privstream.ledger.policy import LedgerPolicy
from privstream.ledger.updates import Updates

#: a record's outcome: released, over its window's cap, over its lifetime cap
RELEASED, OVER_WINDOW, OVER_LIFETIME = 0, 1, 2


@dataclass(frozen=True)
class Batch:
    """The screened records of one partition's batch, in offset order."""

    subjects: list[bytes]
    #: each record's ledger window start
    starts: npt.NDArray[np.int64]
    #: each record's time per aggregate, in config order (shape: records x aggregates)
    times: npt.NDArray[np.int64]
    #: each record's row in ``window_spent`` (its subject's hash in its ledger window)
    window_group: npt.NDArray[np.intp]
    #: each record's row in ``life_spent`` (its subject's hash), under a lifetime cap
    life_group: npt.NDArray[np.intp] | None


@dataclass
class Spent:
    """What the batch's subjects spent before it, updated as it is decided."""

    #: per window group: epsilon and delta units
    window: list[list[int]]
    #: per lifetime group: epsilon units (empty without a lifetime cap)
    life: list[int]


class _Decider:
    def __init__(
        self, policy: LedgerPolicy, costs: Sequence[AggregateCost], decisions: Decisions
    ) -> None:
        self.policy = policy
        self.costs = costs
        self.decisions = decisions
        self._prefixes: dict[tuple[int, int, int], bytes] = {}

    def outcome(self, spent: Spent, at: tuple[int, int | None], units: tuple[int, int]) -> int:
        """Charge ``units`` to a window group and lifetime group iff every cap holds."""
        policy, (window, life) = self.policy, at
        row = spent.window[window]
        if row[0] + units[0] > policy.cap_units or row[1] + units[1] > policy.delta_cap_units:
            return OVER_WINDOW
        cap = policy.lifetime_cap_units
        if cap is not None and life is not None:
            if spent.life[life] + units[0] > cap:
                return OVER_LIFETIME
            spent.life[life] += units[0]
        row[0] += units[0]
        row[1] += units[1]
        return RELEASED

    def key(self, ledger_start: int, aggregate: int, aggregate_start: int) -> bytes:
        """The decision key's prefix of a contribution (the subject follows)."""
        at = (ledger_start, aggregate, aggregate_start)
        prefix = self._prefixes.get(at)
        if prefix is None:
            window = (ledger_start, self.policy.window_ms)
            pid = self.costs[aggregate].partial_id
            prefix = self._prefixes[at] = codec.decision_prefix(window, aggregate_start, pid)
        return prefix


def decide(
    policy: LedgerPolicy,
    costs: Sequence[AggregateCost],
    decisions: Decisions,
    batch: Batch,
    spent: Spent,
    updates: Updates,
) -> tuple[list[int], npt.NDArray[np.bool_]]:
    """Each record's outcome, and whether it enters each aggregate's window; undecided
    contributions are decided (charged if admitted) and the admissions' rows written to
    ``updates``. A refusal is not kept: the next record of the contribution decides it
    again against a spending that only grew, so it is refused again, as ``JointLedger``
    (which keeps it) has it; ``test_joint_charge`` holds the two together."""
    decider = _Decider(policy, costs, decisions)
    joined = np.zeros(batch.times.shape, dtype=bool)
    outcomes = []
    record = (policy.cost_units, policy.delta_cost_units)
    life = None if batch.life_group is None else batch.life_group.tolist()
    rows = zip(batch.subjects, batch.starts.tolist(), batch.times.tolist(), strict=True)
    for i, (subject, start, times) in enumerate(rows):
        at = (int(batch.window_group[i]), None if life is None else life[i])
        for j, (cost, time) in enumerate(zip(costs, times, strict=True)):
            aggregate_start = time - time % cost.window_ms
            key = decider.key(start, j, aggregate_start) + subject
            admitted = decisions.get(start, key)
            if admitted is None:
                units = (cost.cost_units, cost.delta_cost_units)
                admitted = decider.outcome(spent, at, units) == RELEASED
                if admitted:  # a refusal is not kept: deciding it again refuses it again
                    kept = aggregate_start + cost.window_ms + cost.grace_ms
                    decisions.put(start, key, (kept, admitted), updates)
            joined[i, j] = admitted
        outcomes.append(decider.outcome(spent, at, record))
    return outcomes, joined

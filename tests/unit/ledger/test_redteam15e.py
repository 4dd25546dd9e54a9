"""Red team 15e: a refused contribution is never admitted later (F1, proof step 9).

Refusals are not kept (``joint.decide``): the record path decides a contribution again at
its next record and relies on ``spent(s, W)`` and the lifetime only growing while ``W`` is
open. This holds ``SubjectLedger`` to ``JointLedger`` (which keeps every refusal) through
what could make a spending shrink: crashes that lose an uncommitted batch and restore a
compacted changelog (tombstones applied), a wall clock that moves forward and back, and
records late, in the future and across ledger and aggregate windows. Streams are seeded:
no test here can fail by chance (false-failure probability 0).
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from privstream.ledger import SubjectLedger
from privstream.ledger.aggregate_charges import JointLedger
from privstream.ledger.policy import LedgerPolicy

from tests.unit.ledger.test_aggregate_charges import DAY, HOUR, LIFETIME, policy
from tests.unit.ledger.test_joint_charge import PLANNED, ledger_of

MINUTE = 60_000
#: (subject, ledger time, time per aggregate)
Row = tuple[bytes, int, list[int]]


def _rows(rng: random.Random, now: int) -> list[Row]:
    subjects = [f"s{i}".encode() for i in range(4)]
    rows = []
    for _ in range(rng.choice([1, 2, 5, 20])):
        t = now + rng.randint(-3 * HOUR, 2 * HOUR)
        rows.append(
            (rng.choice(subjects), t, [t + rng.randint(-2 * HOUR, 2 * HOUR) for _ in PLANNED])
        )
    return rows


def _replay(p: LedgerPolicy, seed: int) -> tuple[int, int]:
    """Charge 300 batches, crashing at random (the batch is lost, the compacted changelog
    restored); every committed verdict must be the reference's. Returns the records the
    ledger decided a refused contribution again at, and the restores."""
    rng = random.Random(seed)
    reference, ledger = JointLedger(p, PLANNED), ledger_of(p)
    log: dict[bytes, bytes] = {}
    now, again, restores = 10 * DAY, 0, 0
    for _ in range(300):
        now += rng.choice([0, 1, MINUTE, 5 * MINUTE, 20 * MINUTE, HOUR])
        rows = _rows(rng, now)
        subjects = [r[0] for r in rows]
        charge = ledger.charge(
            0, subjects=subjects, keys=subjects, timestamps_ms=[r[1] for r in rows],
            now_ms=now - rng.choice([0, 0, HOUR, 5 * HOUR]),  # a replica whose clock is slow
            aggregate_ms=np.array([r[2] for r in rows], dtype=np.int64),
        )  # fmt: skip
        assert charge.contributes is not None
        if rng.random() < 0.1:  # killed before the commit: restore what was committed
            ledger, restores = _restored(p, log), restores + 1
            continue
        for key, value in charge.updates:
            if value is None:
                log.pop(key, None)
            else:
                log[key] = value
        for (subject, t, times), reason, joined in zip(
            rows, charge.reasons, charge.contributes.tolist(), strict=True
        ):
            if reason in ("late_record", "future_record"):
                assert not any(joined), "a record the screen refused entered a window"
                continue
            before = {k for k, admitted in reference.decided.items() if not admitted}
            verdict = reference.admit(subject, t, times)
            keys = [
                reference._contribution(subject, i, times[i], t - t % p.window_ms)
                for i in range(len(PLANNED))
            ]
            again += any(k in before for k in keys)  # a refusal decided again
            assert (reason is None, joined) == (verdict.released, list(verdict.contributes))
        if rng.random() < 0.1:
            ledger, restores = _restored(p, log), restores + 1
    return again, restores


def _restored(p: LedgerPolicy, log: dict[bytes, bytes]) -> SubjectLedger:
    ledger = ledger_of(p)
    ledger.restore(0, list(log.items()))
    return ledger


@pytest.mark.parametrize("lifetime", [None, LIFETIME])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_refused_contribution_stays_refused_across_crashes_and_clocks(
    lifetime: float | None, seed: int
) -> None:
    """Daily ledger windows: the costs (records 1.5, windows 1.0, 0.5 and 0.2 against 4.0)
    refuse many contributions that later records of the same day decide again."""
    p = replace(policy(DAY, lifetime), grace_ms=HOUR, max_future_ms=HOUR)
    again, restores = _replay(p, seed)
    assert again > 100, "refused contributions must be decided again for the test to mean anything"
    assert restores > 20

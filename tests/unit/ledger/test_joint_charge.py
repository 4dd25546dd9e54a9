"""The record path's ledger deciding aggregate contributions (``SubjectLedger`` with
``aggregates``): the same decisions as ``JointLedger`` one record at a time, in batches
of any size, their changelog rows, and a restore that decides the rest the same way
(docs/proofs/ledger-aggregates.md, steps 1, 2 and 7). Streams are seeded: no test here
can fail by chance."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from privstream.errors import ChangelogError, MisuseError
from privstream.ledger import SubjectLedger, codec
from privstream.ledger.aggregate_charges import AggregateCost, JointLedger
from privstream.ledger.policy import LedgerPolicy

from tests.unit.ledger.test_aggregate_charges import COSTS, DAY, HOUR, LIFETIME, policy

NOW = 3 * DAY
#: every record of the streams is screened in (neither late nor in the future at NOW)
OPEN = {"grace_ms": 10 * DAY, "max_future_ms": 10 * DAY}
PLANNED = tuple(
    replace(c, partial_id=f"{i:032x}".encode(), grace_ms=HOUR) for i, c in enumerate(COSTS)
)
Row = tuple[bytes, int, list[int], bool]


def ledger_of(p: LedgerPolicy, costs: tuple[AggregateCost, ...] = PLANNED) -> SubjectLedger:
    return SubjectLedger(policy=p, deployment="tests", aggregates=costs)


def stream(seed: int, n: int = 3_000, skew: int = 0) -> list[Row]:
    """(subject, ledger time, time per aggregate, misplaced) in offset order: heavy and
    light subjects over three days; a tenth misplaced (refused by the ledger's screen)."""
    rng = random.Random(seed)
    subjects = [f"s{i}".encode() for i in range(30)]
    weights = [1 + 30 * (i % 5 == 0) for i in range(len(subjects))]
    rows = []
    for _ in range(n):
        t = rng.randrange(0, 3 * DAY)
        times = [max(0, t + rng.randint(-skew, skew)) for _ in PLANNED]
        rows.append((rng.choices(subjects, weights)[0], t, times, rng.random() < 0.1))
    return rows


def charge(ledger: SubjectLedger, rows: list[Row], now: int = NOW) -> tuple[list, np.ndarray]:
    subjects = [r[0] for r in rows]
    verdict = ledger.charge(
        0,
        subjects=subjects,
        keys=subjects,
        timestamps_ms=[r[1] for r in rows],
        now_ms=now,
        misplaced=[r[3] for r in rows],
        aggregate_ms=np.array([r[2] for r in rows], dtype=np.int64).reshape(
            -1, len(ledger.aggregates)
        ),
    )
    assert verdict.contributes is not None
    return verdict.reasons, verdict.contributes


def in_batches(ledger: SubjectLedger, rows: list[Row], seed: int) -> tuple[list, np.ndarray]:
    rng = random.Random(seed)
    reasons: list = []
    joined = []
    at = 0
    while at < len(rows):
        size = rng.choice([1, 2, 7, 50, 400])
        got, contributes = charge(ledger, rows[at : at + size])
        reasons += got
        joined.append(contributes)
        at += size
    return reasons, np.concatenate(joined)


@pytest.mark.parametrize("ledger_window", [HOUR, DAY])
@pytest.mark.parametrize("lifetime", [None, LIFETIME])
@pytest.mark.parametrize("skew", [0, 2 * HOUR])
def test_batches_decide_as_the_reference_one_record_at_a_time(
    ledger_window: int, lifetime: float | None, skew: int
) -> None:
    p = replace(policy(ledger_window, lifetime), **OPEN)
    rows = stream(ledger_window + skew + (lifetime is not None), skew=skew)
    reference = JointLedger(p, PLANNED)
    expected_reasons, expected_joined = [], []
    for subject, t, times, misplaced in rows:
        if misplaced:
            expected_reasons.append("subject_partition_mismatch")
            expected_joined.append([False] * len(PLANNED))
            continue
        verdict = reference.admit(subject, t, times)
        reason = None if verdict.released else "budget_exhausted"
        if reason and lifetime is not None and _over_lifetime(reference, p, subject, t):
            reason = "lifetime_exhausted"
        expected_reasons.append(reason)
        expected_joined.append(list(verdict.contributes))
    reasons, joined = in_batches(ledger_of(p), rows, seed=ledger_window)
    assert [r is None for r in reasons] == [r is None for r in expected_reasons]
    assert reasons == expected_reasons
    assert joined.tolist() == expected_joined
    # the streams are heavy enough for every kind of decision to occur
    assert 0.05 < joined.mean() < 0.9
    assert reasons.count("budget_exhausted") > 100
    if lifetime is not None and ledger_window == HOUR:  # 72 windows of 4.0 against 11.0
        assert reasons.count("lifetime_exhausted") > 100


def _over_lifetime(ref: JointLedger, p: LedgerPolicy, subject: bytes, t: int) -> bool:
    """Whether a refused record fit its window (so the lifetime refused it), as ``core``
    reports the reason: the window first."""
    spent = ref.spent[(subject, t - t % p.window_ms)]
    fits = spent[0] + p.cost_units <= p.cap_units
    return fits and spent[1] + p.delta_cost_units <= p.delta_cap_units


def test_a_contribution_is_charged_once_and_before_its_record() -> None:
    p = replace(policy(), **OPEN)
    ledger = ledger_of(p, PLANNED[:1])  # hourly: 1.0 per window, records 1.5, cap 4.0
    rows = [(b"s", 10 + i, [10 + i], False) for i in range(3)]
    reasons, joined = charge(ledger, rows)
    # window 1.0 then two records 3.0: the third is over, yet counts in its admitted window
    assert reasons == [None, None, "budget_exhausted"]
    assert joined.tolist() == [[True], [True], [True]]
    decisions = [(k, v) for k, v in ledger.snapshot(0).items() if k[:2] == codec.DECISION]
    key = codec.decision_prefix((0, DAY), 0, PLANNED[0].partial_id) + b"s"
    assert decisions == [(key, codec.encode_decision(HOUR + HOUR, True))]  # end + grace
    # the next hour's window would go over the cap: refused, and so are its records
    reasons, joined = charge(ledger, [(b"s", HOUR + 1, [HOUR + 1], False)])
    assert (reasons, joined.tolist()) == (["budget_exhausted"], [[False]])


def test_a_restore_decides_the_rest_as_one_ledger_would() -> None:
    """Replay after a crash: the changelog rows of the committed batches restore every
    decision, and the uncommitted rest is decided again the same way."""
    p = replace(policy(6 * HOUR, LIFETIME), **OPEN)
    rows = stream(7, skew=HOUR)
    whole = ledger_of(p)
    expected = in_batches(whole, rows, seed=1)
    first = ledger_of(p)
    log: list[tuple[bytes, bytes | None]] = []
    half = len(rows) // 2
    for batch in (rows[:half],):
        subjects = [r[0] for r in batch]
        verdict = first.charge(
            0, subjects=subjects, keys=subjects, timestamps_ms=[r[1] for r in batch],
            now_ms=NOW, misplaced=[r[3] for r in batch],
            aggregate_ms=np.array([r[2] for r in batch]),
        )  # fmt: skip
        log += list(verdict.updates)
    assert any(key[:2] == codec.DECISION for key, _ in log)
    restored = ledger_of(p)
    restored.restore(0, log)
    assert restored.snapshot(0) == first.snapshot(0)
    rest = in_batches(restored, rows[half:], seed=2)
    head = in_batches(ledger_of(p), rows[:half], seed=3)
    assert head[0] + rest[0] == expected[0]
    assert np.concatenate([head[1], rest[1]]).tolist() == expected[1].tolist()
    assert restored.snapshot(0) == whole.snapshot(0)


def test_decisions_expire_once_both_windows_are_past() -> None:
    """Kept until the ledger window is closed and the aggregate window's end plus grace
    has passed: here the daily aggregate (grace 1 h) outlives an hourly ledger window."""
    p = replace(policy(HOUR), grace_ms=0, max_future_ms=DAY)
    ledger = ledger_of(p, PLANNED[1:2])
    charge(ledger, [(b"s", 5, [5], False)], now=10)
    key = codec.decision_prefix((0, HOUR), 0, PLANNED[1].partial_id) + b"s"
    assert key in ledger.snapshot(0)
    # the ledger hour is closed, the aggregate's day (and grace) is not: kept
    reasons, _ = charge(ledger, [(b"s", 2 * HOUR, [2 * HOUR], False)], now=2 * HOUR + 1)
    assert reasons == [None]
    assert key in ledger.snapshot(0)
    # past the day's end plus its hour of grace: tombstoned in that batch's updates
    subjects = [b"t"]
    verdict = ledger.charge(
        0, subjects=subjects, keys=subjects, timestamps_ms=[DAY + 2 * HOUR],
        now_ms=DAY + 2 * HOUR, aggregate_ms=[[DAY + 2 * HOUR]],
    )  # fmt: skip
    assert (key, None) in list(verdict.updates)
    assert key not in ledger.snapshot(0)


def test_the_decision_row_round_trips_and_a_malformed_one_is_refused() -> None:
    pid = b"ab" * 16
    key = codec.decision_prefix((DAY, DAY), DAY + HOUR, pid) + b"subject"
    assert codec.kind_of(key) == b"A"
    assert codec.decision_of(key) == (DAY, DAY, DAY + HOUR, pid, b"subject")
    assert codec.decode_decision(codec.encode_decision(123, False)) == (123, False)
    with pytest.raises(ChangelogError, match="unknown record type"):
        codec.kind_of(key[: codec.DECISION_PREFIX_LEN + 5])  # cut inside the plan id
    with pytest.raises(ChangelogError, match="flagged 2"):
        codec.decode_decision(b"\0" * 8 + b"\2")
    with pytest.raises(ChangelogError, match="a A record of 16 bytes"):
        ledger_of(policy()).restore(0, [(key, b"\0" * 16)])
    with pytest.raises(ChangelogError, match="plan id of 0 bytes"):
        codec.decision_prefix((0, DAY), 0, b"")


def test_a_ledger_with_aggregates_refuses_what_it_cannot_key_or_place() -> None:
    with pytest.raises(MisuseError, match="has no partial_id"):
        ledger_of(policy(), COSTS)
    ledger = ledger_of(replace(policy(), **OPEN))
    with pytest.raises(MisuseError, match=r"shape \(1, 3\)"):
        ledger.charge(0, subjects=[b"s"], keys=[b"s"], timestamps_ms=[1], now_ms=NOW)

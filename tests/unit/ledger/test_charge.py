"""The vectorised charge against a plain one-record-at-a-time reference, and its edge cases."""

from __future__ import annotations

import re
import struct
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from privstream.errors import LedgerError, MisuseError
from privstream.ledger import REASONS, LedgerPolicy, SubjectLedger, core, replay

DAY = 86_400_000
POLICY = LedgerPolicy(
    window_ms=1_000,
    grace_ms=200,
    max_future_ms=100,
    cost_units=3,
    delta_cost_units=2,
    cap_units=10,  # 3 records by epsilon
    delta_cap_units=5,  # 2 records by delta: delta binds
    lifetime_cap_units=25,  # 8 records
    over_budget="drop",
    epsilon=1e-8,
    delta=5e-18,
    lifetime_epsilon=2.5e-8,
    record_epsilon=3e-9,
    record_delta=2e-18,
)


class Reference:
    """The ledger's rules applied one record at a time, with plain dicts.

    ``identity``: whom the ledger takes a subject for (itself; in the collision test, a
    class of subjects whose hashes are made to collide)."""

    def __init__(self, policy: LedgerPolicy, identity: Any = None) -> None:
        self.p = policy
        self.identity = identity or (lambda subject: subject)
        self.spent: dict[tuple[int, bytes], list[int]] = {}
        self.life: dict[bytes, int] = {}
        self.clock: int | None = None

    def charge(self, subjects: list[Any], keys: list[Any], ts: list[int], now: int) -> list[Any]:
        p = self.p
        self.clock = now if self.clock is None else max(self.clock, now)
        out: list[str | None] = []
        for subject, key, t in zip(subjects, keys, ts, strict=True):
            start = (t // p.window_ms) * p.window_ms
            if subject is None:
                out.append("no_subject")
            elif len(subject) > 1024:
                out.append("subject_too_long")
            elif key != subject:
                out.append("subject_key_mismatch")
            elif t > self.clock + p.max_future_ms:
                out.append("future_record")
            elif start + p.window_ms + p.grace_ms < self.clock:
                out.append("late_record")
            elif p.lifetime_cap_units is not None and (
                self.life.get(self.identity(subject), 0) + p.cost_units > p.lifetime_cap_units
            ):
                out.append("lifetime_exhausted")
            else:
                who = self.identity(subject)
                eps, dlt = self.spent.get((start, who), [0, 0])
                if eps + p.cost_units > p.cap_units or dlt + p.delta_cost_units > p.delta_cap_units:
                    out.append("budget_exhausted")
                    continue
                self.spent[(start, who)] = [eps + p.cost_units, dlt + p.delta_cost_units]
                self.life[who] = self.life.get(who, 0) + p.cost_units
                out.append(None)
        return out

    def live_windows(self) -> dict[tuple[int, bytes], list[int]]:
        assert self.clock is not None
        span = self.p.window_ms + self.p.grace_ms
        return {k: v for k, v in self.spent.items() if k[0] + span >= self.clock}


def windows_of(snapshot: dict[bytes, bytes]) -> dict[tuple[int, bytes], list[int]]:
    """Decode the ``W`` records of a snapshot (layout written out from the codec docstring)."""
    found = {}
    for key, value in snapshot.items():
        if key[:2] == b"\x01W":
            start, _length = struct.unpack(">qq", key[2:18])
            found[(start, key[18:])] = list(struct.unpack(">qq", value))
    return found


def random_batch(rng: np.random.Generator, now: int, size: int) -> tuple[list[Any], ...]:
    names = [b"alice", b"bob", b"carol", b"\x00", b"dave\x00", b"e" * 1024, b"f" * 1025]
    subjects: list[Any] = [names[i] for i in rng.integers(0, len(names), size)]
    keys = list(subjects)
    for i in np.flatnonzero(rng.random(size) < 0.05):
        subjects[i] = None
    for i in np.flatnonzero(rng.random(size) < 0.05):
        keys[i] = b"mallory"
    ts = (now + rng.integers(-1_000, 150, size)).tolist()
    return subjects, keys, ts


@pytest.mark.parametrize("lifetime", [25, None])
@pytest.mark.parametrize("seed", range(4))
def test_vectorised_charge_equals_the_per_record_reference(seed: int, lifetime: int | None) -> None:
    policy = replace(POLICY, lifetime_cap_units=lifetime)
    rng = np.random.default_rng(seed)
    ledger, ref = SubjectLedger(policy=policy, deployment="tests"), Reference(policy)
    log: list[tuple[bytes, bytes | None]] = []
    now = 10_000
    for _ in range(150):
        now += int(rng.integers(-100, 300))  # a wall clock that sometimes steps back
        subjects, keys, ts = random_batch(rng, now, int(rng.integers(0, 30)))
        charge = ledger.charge(3, subjects=subjects, keys=keys, timestamps_ms=ts, now_ms=now)
        expected = ref.charge(subjects, keys, ts, now)
        assert charge.reasons == expected
        assert charge.admitted.tolist() == [r is None for r in expected]
        log.extend(charge.updates)
        assert windows_of(ledger.snapshot(3)) == ref.live_windows()
    restored = SubjectLedger(policy=policy, deployment="tests")
    restored.restore(3, log)
    assert restored.snapshot(3) == ledger.snapshot(3)
    assert restored.counts(3) == ledger.counts(3)


@pytest.mark.parametrize("lifetime", [25, None])
def test_subjects_whose_hashes_collide_share_one_budget(
    lifetime: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger keys subjects by hash(): colliding subjects are one subject to it, each
    charged for both (never under-charged), and a restore keeps that."""
    policy = replace(POLICY, lifetime_cap_units=lifetime)
    rng = np.random.default_rng(5)

    def identity(subject: bytes) -> int:
        return len(subject) % 2  # odd lengths collide: alice, bob, carol, \x00, dave\x00

    monkeypatch.setattr(
        core, "hashes", lambda subjects: np.array([identity(s) for s in subjects], np.int64)
    )
    monkeypatch.setattr(replay, "hashes", core.hashes)
    ledger, ref = SubjectLedger(policy=policy, deployment="tests"), Reference(policy, identity)
    apart = Reference(policy)  # the same records without collisions
    log: list[tuple[bytes, bytes | None]] = []
    stricter = 0  # records the collisions suppressed
    now = 10_000
    for step in range(120):
        now += int(rng.integers(-100, 300))
        subjects, keys, ts = random_batch(rng, now, int(rng.integers(0, 30)))
        charge = ledger.charge(3, subjects=subjects, keys=keys, timestamps_ms=ts, now_ms=now)
        assert charge.reasons == ref.charge(subjects, keys, ts, now)
        alone = apart.charge(subjects, keys, ts, now)
        pairs = zip(alone, charge.reasons, strict=True)
        stricter += sum(a is None and b is not None for a, b in pairs)
        log.extend(charge.updates)
        if step == 60:  # a restore from the changelog charges on as the ledger does
            ledger = SubjectLedger(policy=policy, deployment="tests")
            ledger.restore(3, log)
    assert stricter > 10, "the collisions were never exercised"


def test_thousands_of_records_of_one_subject_in_one_batch() -> None:
    policy = replace(POLICY, delta_cost_units=0, cap_units=120, lifetime_cap_units=None)
    ledger = SubjectLedger(policy=policy, deployment="tests")
    n = 5_000
    charge = ledger.charge(
        0, subjects=[b"d"] * n, keys=[b"d"] * n, timestamps_ms=np.full(n, 5_500), now_ms=5_600
    )
    assert charge.admitted.sum() == 40  # 40 * 3 = 120 units
    assert charge.admitted[:40].all()
    assert set(charge.reasons[40:]) == {"budget_exhausted"}
    assert windows_of(ledger.snapshot(0)) == {(5_000, b"d"): [120, 0]}
    assert ledger.counts(0)["released"] == 40
    assert ledger.counts(0)["budget_exhausted"] == n - 40


def charge_one(ledger: SubjectLedger, t: int, now: int, subject: bytes = b"s") -> str | None:
    charge = ledger.charge(1, subjects=[subject], keys=[subject], timestamps_ms=[t], now_ms=now)
    return charge.reasons[0]


def test_window_rollover_opens_a_fresh_budget_and_tombstones_the_old_window() -> None:
    ledger = SubjectLedger(policy=replace(POLICY, lifetime_cap_units=None), deployment="tests")
    assert [charge_one(ledger, 1_500, 1_500) for _ in range(3)] == [None, None, "budget_exhausted"]
    assert charge_one(ledger, 2_000, 2_000) is None  # the next window
    assert charge_one(ledger, 1_999, 2_100) == "budget_exhausted"  # late but within grace
    charge = ledger.charge(1, subjects=[], keys=[], timestamps_ms=[], now_ms=2_201)
    assert (b"\x01W" + struct.pack(">qq", 1_000, 1_000) + b"s", None) in charge.updates
    assert charge_one(ledger, 1_999, 2_201) == "late_record"
    assert set(windows_of(ledger.snapshot(1))) == {(2_000, b"s")}


def test_the_lifetime_cap_holds_across_windows() -> None:
    ledger = SubjectLedger(policy=POLICY, deployment="tests")  # 2 per window, 8 per lifetime
    reasons = [charge_one(ledger, w * 1_000 + 10, w * 1_000 + 10) for w in range(6) for _ in "ab"]
    assert reasons[:8] == [None] * 8
    assert reasons[8:] == ["lifetime_exhausted"] * 4
    assert charge_one(ledger, 6_010, 6_010, subject=b"other") is None


def test_late_and_future_records_are_suppressed_with_their_own_reasons() -> None:
    ledger = SubjectLedger(policy=POLICY, deployment="tests")
    assert charge_one(ledger, 10_101, 10_000) == "future_record"
    assert charge_one(ledger, 10_100, 10_000) is None
    assert charge_one(ledger, 8_799, 10_000) == "late_record"  # window [8000, 9000) + 200 < now
    # the wall clock stepped back to 9000, within the grace of [8000, 9000); the clock did not
    assert charge_one(ledger, 8_999, 9_000) == "late_record"
    assert ledger.counts(1)["late_record"] == 2
    assert ledger.counts(1)["future_record"] == 1


def test_mismatched_keys_and_missing_subjects_are_never_charged() -> None:
    ledger = SubjectLedger(policy=POLICY, deployment="tests")
    charge = ledger.charge(
        0, subjects=[b"a", None, b"a"], keys=[b"b", None, None], timestamps_ms=[5] * 3, now_ms=5
    )
    assert charge.reasons == ["subject_key_mismatch", "no_subject", "subject_key_mismatch"]
    assert windows_of(ledger.snapshot(0)) == {}


def test_a_subject_over_1024_bytes_is_never_charged() -> None:
    """A hostile writer's megabyte key would make a changelog record the broker refuses."""
    ledger = SubjectLedger(policy=POLICY, deployment="tests")
    long, longest = b"x" * 1024, b"y" * 1025
    subjects = [long, longest, None, b"y" * 2**20]
    charge = ledger.charge(
        0, subjects=subjects, keys=list(subjects), timestamps_ms=[5] * 4, now_ms=5
    )
    assert charge.reasons == [None, "subject_too_long", "no_subject", "subject_too_long"]
    assert [s for _, s in windows_of(ledger.snapshot(0))] == [long]
    alone = ledger.charge(0, subjects=[longest], keys=[longest], timestamps_ms=[5], now_ms=5)
    assert alone.reasons == ["subject_too_long"] and ledger.counts(0)["subject_too_long"] == 3


def test_a_slower_clock_on_another_replica_cannot_reopen_an_expired_window() -> None:
    first = SubjectLedger(policy=POLICY, deployment="tests")
    log = list(
        first.charge(
            0, subjects=[b"s"] * 3, keys=[b"s"] * 3, timestamps_ms=[500] * 3, now_ms=500
        ).updates
    )
    log += first.charge(0, subjects=[], keys=[], timestamps_ms=[], now_ms=5_000).updates
    second = SubjectLedger(policy=POLICY, deployment="tests")
    second.restore(0, log)
    # the second replica's wall clock is 4.4 s behind: window [0, 1000) would look open
    charge = second.charge(0, subjects=[b"s"], keys=[b"s"], timestamps_ms=[600], now_ms=600)
    assert charge.reasons == ["late_record"]


def _released_in_window(policy_after: LedgerPolicy, ts_after: int, now_after: int) -> int:
    """Records of one subject released with timestamps in window [0, 1000): a first config
    spends the cap there and closes the window; a second config takes over the changelog."""
    first = SubjectLedger(policy=POLICY, deployment="tests")
    ones = [b"s"] * 3
    charge = first.charge(0, subjects=ones, keys=ones, timestamps_ms=[500] * 3, now_ms=500)
    released = sum(charge.admitted.tolist())
    log = [*charge.updates]
    log += first.charge(0, subjects=[], keys=[], timestamps_ms=[], now_ms=1_300).updates
    second = SubjectLedger(policy=policy_after, deployment="tests")
    second.restore(0, log)
    again = second.charge(
        0, subjects=ones, keys=ones, timestamps_ms=[ts_after] * 3, now_ms=now_after
    )
    return released + sum(again.admitted.tolist())


@pytest.mark.parametrize(
    ("change", "policy_after", "ts_after"),
    [
        ("a longer grace", replace(POLICY, grace_ms=5_000), 600),
        ("a longer window", replace(POLICY, window_ms=4_000), 1_400),
    ],
)
def test_a_config_change_never_reopens_a_closed_window(
    change: str, policy_after: LedgerPolicy, ts_after: int
) -> None:
    # the cap is 2 records per window (delta binds); under the first config window [0, 1000)
    # released 2 and closed at 1300 (end 1000 + grace 200 < clock). Without the closed-through
    # record, a longer grace reopens it, and a 4 s window [0, 4000) starts from zero.
    assert _released_in_window(policy_after, ts_after, now_after=1_400) == 2, change


def test_the_closed_past_survives_a_restore_and_only_moves_forward() -> None:
    ledger = SubjectLedger(policy=POLICY, deployment="tests")
    ledger.charge(0, subjects=[], keys=[], timestamps_ms=[], now_ms=5_250)
    closed = ledger.snapshot(0)[b"\x01E"]
    assert struct.unpack(">q", closed) == (5_000,)  # the end of [4000, 5000): 5000 + 200 < 5250
    wider = SubjectLedger(policy=replace(POLICY, grace_ms=3_000), deployment="tests")
    wider.restore(0, ledger.snapshot(0).items())
    wider.charge(0, subjects=[], keys=[], timestamps_ms=[], now_ms=5_300)
    assert wider.snapshot(0)[b"\x01E"] == closed  # 5300 - 3000 closes less: kept


def test_restore_of_a_snapshot_equals_the_ledger_and_forget_drops_it() -> None:
    ledger = SubjectLedger(policy=POLICY, deployment="tests")
    ledger.charge(
        2,
        subjects=[b"a", b"b", b"a"],
        keys=[b"a", b"b", b"a"],
        timestamps_ms=[100, 200, 1_100],
        now_ms=1_100,
    )
    copy = SubjectLedger(policy=POLICY, deployment="tests")
    copy.restore(2, ledger.snapshot(2).items())
    assert copy.snapshot(2) == ledger.snapshot(2)
    assert copy.counts(2) == ledger.counts(2) == {"released": 3, **dict.fromkeys(REASONS, 0)}
    copy.forget(2)
    assert copy.snapshot(2) == {}


def test_restore_refuses_a_changelog_it_cannot_enforce() -> None:
    ledger = SubjectLedger(policy=POLICY, deployment="tests")
    with pytest.raises(LedgerError, match="version 2"):
        ledger.restore(0, [(b"\x02W", b"")])
    other = b"\x01W" + struct.pack(">qq", 0, 2_000) + b"s"
    with pytest.raises(LedgerError, match=re.escape("2s windows, but privacy.ledger.window is 1s")):
        ledger.restore(0, [(other, bytes(16))])
    ledger.restore(0, [(other, bytes(16)), (other, None)])  # tombstoned: nothing to enforce
    mine = b"\x01W" + struct.pack(">qq", 0, 1_000) + b"s"
    with pytest.raises(LedgerError, match="a W record of 8 bytes"):
        ledger.restore(0, [(mine, bytes(8))])
    with pytest.raises(LedgerError, match="unknown record type"):
        ledger.restore(0, [(b"\x01X", b"")])


def test_charge_refuses_mismatched_lengths() -> None:
    with pytest.raises(MisuseError, match="2 subjects, 1 keys"):
        SubjectLedger(policy=POLICY, deployment="tests").charge(
            0, subjects=[b"a", b"b"], keys=[b"a"], timestamps_ms=[1, 2], now_ms=0
        )


def test_windows_are_utc_days() -> None:
    policy = replace(POLICY, window_ms=DAY, grace_ms=0, max_future_ms=DAY)
    ledger = SubjectLedger(policy=policy, deployment="tests")
    midnight = 20_000 * DAY  # 2024-10-04T00:00Z
    ledger.charge(
        0,
        subjects=[b"s", b"s"],
        keys=[b"s", b"s"],
        timestamps_ms=[midnight - 1, midnight],
        now_ms=midnight,
    )
    assert set(windows_of(ledger.snapshot(0))) == {(midnight - DAY, b"s"), (midnight, b"s")}


def test_a_record_on_another_partition_than_its_key_is_never_charged() -> None:
    ledger = SubjectLedger(policy=POLICY, deployment="tests")
    charge = ledger.charge(
        0,
        subjects=[b"s", b"s", b"t", None],
        keys=[b"s", b"s", b"x", None],
        timestamps_ms=[500, 500, 500, 500],
        now_ms=500,
        misplaced=[False, True, True, True],
    )
    # the key and subject checks are more basic: they are reported first
    assert charge.reasons == [
        None,
        "subject_partition_mismatch",
        "subject_key_mismatch",
        "no_subject",
    ]
    assert ledger.counts(0)["subject_partition_mismatch"] == 1
    spent = windows_of(ledger.snapshot(0))
    assert list(spent) == [(0, b"s")]  # one record's cost: the misplaced one is not charged

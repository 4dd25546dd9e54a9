"""A restore keeps the largest spending and the latest closed past it reads (``state._apply``):
a stale write that slipped past fencing (an older owner's lower values, written after the
new owner's) never gives a subject budget back (docs/ledger.md, "Stale writes").

Expected values come from the writes themselves (the largest of each key since its last
tombstone), never from the ledger's state.
"""

from __future__ import annotations

import random
import struct
from dataclasses import replace

from privstream.ledger import SubjectLedger, codec

from tests.unit.ledger.test_charge import POLICY

Log = list[tuple[bytes, bytes | None]]
#: room for many records per window: stale writes are below the cap, where they matter
ROOMY = replace(POLICY, cap_units=300, delta_cap_units=200, lifetime_cap_units=10**6)


def spend(eps: int, delta: int) -> bytes:
    return struct.pack(">qq", eps, delta)


def changelog(ledger: SubjectLedger, subjects: list[bytes], ts: list[int], now: int) -> Log:
    """Charge a batch; the changelog records it writes, in order."""
    charge = ledger.charge(0, subjects=subjects, keys=subjects, timestamps_ms=ts, now_ms=now)
    return [pair for run in charge.updates.runs for pair in run.pairs()]


def restored(log: Log, policy: object = ROOMY) -> dict[bytes, bytes]:
    ledger = SubjectLedger(policy=policy, deployment="tests")  # type: ignore[arg-type]
    ledger.restore(0, log)
    return ledger.snapshot(0)


def test_a_lower_window_value_written_later_does_not_lower_the_spending() -> None:
    key = codec.window_prefix(0, ROOMY.window_ms) + b"alice"
    log: Log = [(key, spend(9, 6)), (key, spend(3, 2))]
    assert restored(log)[key] == spend(9, 6)


def test_each_component_keeps_its_own_maximum() -> None:
    """Both units only grow with every admitted record: the maximum of each is a value some
    committed write reached, never below the truth."""
    key = codec.window_prefix(0, ROOMY.window_ms) + b"bob"
    assert restored([(key, spend(9, 2)), (key, spend(3, 6))])[key] == spend(9, 6)


def test_a_lower_lifetime_value_written_later_does_not_lower_it() -> None:
    key = codec.LIFETIME + b"carol"
    log: Log = [(key, struct.pack(">q", 12)), (key, struct.pack(">q", 3))]
    assert restored(log)[key] == struct.pack(">q", 12)


def test_a_tombstone_still_deletes() -> None:
    key = codec.window_prefix(0, ROOMY.window_ms) + b"dave"
    assert key not in restored([(key, spend(9, 6)), (key, None)])
    # a write after the tombstone starts from nothing: the maximum is since the tombstone
    assert restored([(key, spend(9, 6)), (key, None), (key, spend(3, 2))])[key] == spend(3, 2)


def test_the_closed_past_never_moves_back() -> None:
    log: Log = [
        (codec.CLOSED_KEY, codec.encode_int(5_000)),
        (codec.CLOSED_KEY, codec.encode_int(2_000)),
    ]
    assert restored(log)[codec.CLOSED_KEY] == codec.encode_int(5_000)


def test_random_interleavings_of_stale_writes_restore_the_true_spending() -> None:
    """Two owners charge one partition in turn from the same start; the one that lost it
    writes its (lower) values after the other's, at random points. The restore holds what
    the live owner's ledger holds, record for record. 200 seeds; deterministic."""
    for seed in range(200):
        rng = random.Random(seed)
        subjects = [b"s%d" % i for i in range(rng.randint(1, 12))]
        live, zombie = (
            SubjectLedger(policy=ROOMY, deployment="tests"),
            SubjectLedger(policy=ROOMY, deployment="tests"),
        )
        log: Log = []
        held: Log = []  # the zombie's batch, committed late
        now = 10_000
        for step in range(rng.randint(2, 25)):
            now += rng.randint(0, 300)
            batch = [rng.choice(subjects) for _ in range(rng.randint(1, 8))]
            ts = [now - rng.randint(0, 250) for _ in batch]
            log += changelog(live, batch, ts, now)
            if step == 0:
                zombie.restore(0, list(log))
            elif rng.random() < 0.5:
                held += changelog(zombie, batch, ts, now)  # charged from its older state
            if held and rng.random() < 0.3:
                log += held
                held = []
        log += held
        assert kept(restored(log)) == kept(live.snapshot(0)), seed


def kept(snapshot: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """Spending and the closed past, without windows it closed: a slower zombie may have
    written one of those after its tombstone (the next charge tombstones it again, and its
    records are ``late_record`` meanwhile)."""
    closed = codec.decode_int(snapshot.get(codec.CLOSED_KEY, codec.encode_int(-(2**62))))
    return {
        k: v
        for k, v in snapshot.items()
        if k[1:2] in (b"L", b"E") or (k[1:2] == b"W" and codec.window_of(k)[0] >= closed)
    }


def test_after_a_stale_write_a_full_subject_is_still_refused() -> None:
    """The issue's failure: the new owner brings a subject to its cap, the old one's lower
    value lands last; the next restore must refuse the subject's next record."""
    policy = replace(POLICY, cap_units=12, delta_cap_units=8)  # 4 records per window
    old, new = (
        SubjectLedger(policy=policy, deployment="tests"),
        SubjectLedger(policy=policy, deployment="tests"),
    )
    log = changelog(new, [b"eve"], [1_000], 1_000)
    old.restore(0, list(log))
    stale = changelog(old, [b"eve"], [1_001], 1_001)  # spent 2, held through a freeze
    log += changelog(new, [b"eve"] * 3, [1_001, 1_002, 1_002], 1_002)  # spent 4: the cap
    log += stale
    after = SubjectLedger(policy=policy, deployment="tests")
    after.restore(0, log)
    charge = after.charge(0, subjects=[b"eve"], keys=[b"eve"], timestamps_ms=[1_003], now_ms=1_003)
    assert charge.reasons == ["budget_exhausted"]

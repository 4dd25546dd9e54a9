"""What ``core._store`` writes: each subject's changelog record holds that subject's own
spending, through the distinct-subject shortcut (``names = subjects``), batches over
several windows, the lifetime run, table growth, hash collisions and window closes; and
the record batches' bytes restore to the ledger.

Expected values are counted from the admitted records alone (cost times count), never
read from the ledger's state.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from privstream.ledger import SubjectLedger, codec
from privstream.ledger.spending import hashes

from tests.unit.ledger.test_charge import POLICY
from tests.unit.ledger.test_collisions import Hashes
from tests.unit.worker.test_record_batch import replay, written

#: every record fits: each admitted record must show in its subject's own record
OPEN = replace(
    POLICY, cap_units=10**9, delta_cap_units=10**9, lifetime_cap_units=10**9, grace_ms=10**9
)
#: names of every length class the record batch cuts by: 1 byte to MAX_SUBJECT_BYTES
POOL = [bytes([65 + i % 26]) * (1 + i % 5) + b"%d" % i for i in range(300)]
POOL += [b"\x00", b"z", b"y" * 1024, b"x" * 1023]


def batch(rng: np.random.Generator, now: int, step: int) -> tuple[list[bytes], list[int]]:
    """Distinct subjects in one window (the shortcut), distinct over several windows, or
    subjects repeated."""
    size = int(rng.integers(1, 120))
    kind = step % 3
    if kind == 2:
        subjects = [POOL[i] for i in rng.integers(0, len(POOL), size)]
    else:
        subjects = [POOL[i] for i in rng.choice(len(POOL), size, replace=False)]
    spread = 1 if kind == 0 else 3_000
    return subjects, (now - rng.integers(0, spread, size)).tolist()


def expected_values(
    admitted: Counter[tuple[int, bytes]], window_ms: int
) -> dict[bytes, tuple[int, ...]]:
    """The changelog value each subject's records must hold, from the admitted counts."""
    values: dict[bytes, tuple[int, ...]] = {}
    lifetime: Counter[bytes] = Counter()
    for (start, subject), n in admitted.items():
        prefix = codec.window_prefix(start, window_ms)
        values[prefix + subject] = (n * OPEN.cost_units, n * OPEN.delta_cost_units)
        lifetime[subject] += n
    for subject, n in lifetime.items():
        values[codec.LIFETIME + subject] = (n * OPEN.cost_units,)
    return values


def decoded(value: bytes) -> tuple[int, ...]:
    return struct.unpack(f">{len(value) // 8}q", value)


def test_each_subjects_record_holds_its_own_spending_through_the_shortcut() -> None:
    rng = np.random.default_rng(19)
    ledger = SubjectLedger(policy=OPEN, deployment="tests")
    admitted: Counter[tuple[int, bytes]] = Counter()
    log: list[tuple[bytes, bytes | None]] = []
    kept: dict[bytes, bytes] = {}
    now = 100_000
    for step in range(90):
        now += int(rng.integers(0, 50))
        subjects, ts = batch(rng, now, step)
        charge = ledger.charge(0, subjects=subjects, keys=subjects, timestamps_ms=ts, now_ms=now)
        assert charge.admitted.all()
        for subject, t in zip(subjects, ts, strict=True):
            admitted[(t - t % OPEN.window_ms, subject)] += 1
        records = written(charge.updates, max_bytes=[500, 1 << 20][step % 2])
        log.extend(records)
        replay(records, kept)
        expected = expected_values(admitted, OPEN.window_ms)
        for key, _ in records:  # every record this charge wrote holds its subject's total
            if key in expected:
                assert decoded(kept[key]) == expected[key], key
    assert {k: decoded(v) for k, v in kept.items() if k in expected} == expected
    restored = SubjectLedger(policy=OPEN, deployment="tests")
    restored.restore(0, log)
    assert restored.snapshot(0) == ledger.snapshot(0) == kept


@pytest.mark.parametrize("buckets", [3, 61])
def test_colliding_subjects_each_keep_at_least_their_own_spending(
    monkeypatch: pytest.MonkeyPatch, buckets: int
) -> None:
    """Hashes made to collide (``buckets`` rows for 304 subjects), windows closing under a
    short grace: every live record holds at least its subject's own spending, and a
    restore under another hash gives the same compacted changelog."""
    colliding = Hashes(monkeypatch)
    colliding.identity = lambda s: hash(s) % buckets
    policy = replace(OPEN, grace_ms=1_500)
    rng = np.random.default_rng(buckets)
    ledger = SubjectLedger(policy=policy, deployment="tests")
    admitted: Counter[tuple[int, bytes]] = Counter()
    log: list[tuple[bytes, bytes | None]] = []
    kept: dict[bytes, bytes] = {}
    now = 100_000
    for step in range(60):
        now += int(rng.integers(0, 400))
        subjects, ts = batch(rng, now, step)
        charge = ledger.charge(0, subjects=subjects, keys=subjects, timestamps_ms=ts, now_ms=now)
        for subject, t, ok in zip(subjects, ts, charge.admitted.tolist(), strict=True):
            admitted[(t - t % policy.window_ms, subject)] += ok
        records = written(charge.updates, max_bytes=1 << 20)
        log.extend(records)
        replay(records, kept)
    expected = expected_values(admitted, policy.window_ms)
    live = [key for key in kept if key in expected]
    assert len(live) > 100
    short = {k for k in live if np.less(decoded(kept[k]), expected[k]).any()}
    assert not short, f"records under their subject's own spending: {sorted(short)[:3]}"
    colliding.identity = lambda s: hash(s)  # a restart under a hash without collisions
    restored = SubjectLedger(policy=policy, deployment="tests")
    restored.restore(0, log)
    assert restored.snapshot(0) == kept


def test_restored_tables_name_each_slot_by_a_subject_of_that_slot() -> None:
    """After a restore (``replay``: each batch's new keys ``put``), each slot's name
    hashes to it."""
    ledger = SubjectLedger(policy=OPEN, deployment="tests")
    subjects = POOL[:200]
    ledger.charge(0, subjects=subjects, keys=subjects, timestamps_ms=[5_000] * 200, now_ms=5_000)
    restored = SubjectLedger(policy=OPEN, deployment="tests")
    restored.restore(0, ledger.snapshot(0).items())
    for spending in [*restored._partitions[0].windows.values(), restored._partitions[0].lifetime]:
        names = spending.names
        slots = spending._find(hashes(names), insert=False)[0]
        assert slots.tolist() == list(range(len(names)))
        assert sorted(names) == sorted(subjects)

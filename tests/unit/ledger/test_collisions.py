"""Subjects whose hashes collide, across restores in processes whose hash keys differ.

The ledger keys subjects by ``hash()``, drawn under a key per process, so two
subjects that collide in one process are apart in the next (and the reverse).
The changelog must let every process enforce every cap: each subject's own
record must hold at least what the subject spent, whichever subjects it shared
a row with, and a closed window must leave no record behind. These tests force
collisions by replacing the hash (``Hashes``), change it at each "restart", and
check the caps against the raw records, never against the ledger's own state.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from privstream.ledger import LedgerPolicy, SubjectLedger, core
from privstream.ledger import replay as restoring

from tests.unit.ledger.test_charge import POLICY, random_batch
from tests.unit.worker.test_record_batch import replay

Identity = Callable[[bytes], int]

#: the hashes of successive processes: every one makes other subjects collide
IDENTITIES: list[Identity] = [
    lambda s: len(s) % 2,  # alice, bob, carol, \x00, dave\x00 collide (e*1024 alone)
    lambda s: hash(s),  # no collision (the real hash)
    lambda s: s[:1] in (b"a", b"b", b"\x00"),  # alice, bob, \x00 collide; the others too
    lambda s: len(s) % 3,
]


class Hashes:
    """Stands in for ``spending.hashes`` in the ledger; ``use`` switches the process."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.identity: Identity = IDENTITIES[0]
        monkeypatch.setattr(core, "hashes", self)
        monkeypatch.setattr(restoring, "hashes", self)

    def __call__(self, subjects: Iterable[bytes]) -> Any:
        return np.array([self.identity(s) for s in subjects], dtype=np.int64)


def compacted(log: Iterable[tuple[bytes, bytes | None]]) -> dict[bytes, bytes]:
    """What a compacted changelog keeps: the last value per key, tombstoned keys dropped."""
    return replay(list(log), {})


def window_starts(kept: dict[bytes, bytes]) -> set[int]:
    return {struct.unpack(">q", key[2:10])[0] for key in kept if key[:2] == b"\x01W"}


class Caps:
    """What each subject was released, counted from the raw records alone."""

    def __init__(self, policy: LedgerPolicy) -> None:
        self.p = policy
        self.per_window: Counter[tuple[int, bytes]] = Counter()
        self.lifetime: Counter[bytes] = Counter()

    def add(self, subjects: list[Any], ts: list[int], admitted: Iterable[bool]) -> None:
        for subject, t, released in zip(subjects, ts, admitted, strict=True):
            if released:
                self.per_window[(t - t % self.p.window_ms, subject)] += 1
                self.lifetime[subject] += 1

    def check(self) -> None:
        p = self.p
        per_window = min(p.cap_units // p.cost_units, p.delta_cap_units // p.delta_cost_units)
        over = {k: n for k, n in self.per_window.items() if n > per_window}
        assert not over, f"released more than {per_window} records per window: {over}"
        if p.lifetime_cap_units is not None:
            most = p.lifetime_cap_units // p.cost_units
            over_life = {s: n for s, n in self.lifetime.items() if n > most}
            assert not over_life, f"released more than {most} records in a lifetime: {over_life}"


def test_a_subject_charged_inside_another_subjects_batch_row_keeps_its_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """alice and carol collide in the first process and share a row: one batch releases
    one record of each (delta allows 2 per window). The next process, whose hash keeps
    them apart, must still know that carol spent at least one record's worth; her own
    record holds the row she shared (both records), so none of hers fits any more."""
    hashes = Hashes(monkeypatch)
    policy = replace(POLICY, lifetime_cap_units=None)
    ledger = SubjectLedger(policy=policy, deployment="tests")
    pair = [b"alice", b"carol"]
    first = ledger.charge(0, subjects=pair, keys=pair, timestamps_ms=[10_000] * 2, now_ms=10_000)
    assert first.admitted.tolist() == [True, True]
    kept = compacted(first.updates)
    assert sorted(key[18:] for key in kept if key[:2] == b"\x01W") == pair, "one record each"
    hashes.identity = IDENTITIES[1]  # a restart: a new hash key
    after = SubjectLedger(policy=policy, deployment="tests")
    after.restore(0, kept.items())
    carol = [b"carol"] * 3
    again = after.charge(0, subjects=carol, keys=carol, timestamps_ms=[10_000] * 3, now_ms=10_000)
    assert again.admitted.sum() <= 1, "carol's first record was lost"
    assert again.admitted.tolist() == [False] * 3


def test_a_closed_window_tombstones_every_subject_of_a_shared_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """alice, carol and erin collide, and so do bob and dave. alice and carol share a row
    in one batch, bob and dave in another window; carol meets erin's row in a later batch,
    which ``put`` does not notice (``spending``): that record outlives its window until a
    restore reads it back, and the first charge after the restore tombstones it."""
    hashes = Hashes(monkeypatch)
    hashes.identity = lambda s: 1 if s in (b"alice", b"carol", b"erin") else len(s)
    policy = replace(POLICY, lifetime_cap_units=None)
    ledger = SubjectLedger(policy=policy, deployment="tests")
    log: list[tuple[bytes, bytes | None]] = []

    def charge(subjects: list[bytes], ts: int, now: int) -> None:
        made = ledger.charge(
            0, subjects=subjects, keys=subjects, timestamps_ms=[ts] * len(subjects), now_ms=now
        )
        assert made.admitted.all()
        log.extend(made.updates)

    charge([b"alice", b"carol"], 10_000, 10_000)
    charge([b"bob", b"dave"], 11_000, 11_000)
    charge([b"erin"], 11_000, 11_000)
    charge([b"carol"], 11_000, 11_000)  # shares erin's row, from a later batch
    assert window_starts(compacted(log)) == {10_000, 11_000}
    charge([b"bob"], 12_500, 12_500)  # closes 10,000 (window 1,000, grace 200)
    kept = compacted(log)
    assert window_starts(kept) == {11_000, 12_000}, "a subject of a shared row outlived it"
    charge([b"bob"], 13_500, 13_500)  # closes 11,000 and 12,000: carol's record is missed
    kept = compacted(log)
    assert window_starts(kept) == {11_000, 13_000}
    assert {key[18:] for key in kept if key[:10] == b"\x01W" + struct.pack(">q", 11_000)} == {
        b"carol"
    }
    ledger = SubjectLedger(policy=policy, deployment="tests")
    ledger.restore(0, kept.items())
    charge([b"bob"], 13_500, 13_500)  # the first charge after the restore tombstones it
    assert window_starts(compacted(log)) == {13_000}


@pytest.mark.parametrize("lifetime", [25, None])
@pytest.mark.parametrize("seed", range(3))
def test_restarts_under_other_hashes_never_release_over_a_cap(
    seed: int, lifetime: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of colliding subjects; every 25 batches a restart restores the ledger from
    the compacted changelog under the next hash. No subject is ever released over a cap;
    the first charge after a restart leaves no closed window's record in the changelog;
    the snapshot holds only records the changelog holds, each at least as large."""
    hashes = Hashes(monkeypatch)
    policy = replace(POLICY, lifetime_cap_units=lifetime)
    rng = np.random.default_rng(seed)
    ledger, caps = SubjectLedger(policy=policy, deployment="tests"), Caps(policy)
    log: list[tuple[bytes, bytes | None]] = []
    now = 10_000
    suppressed = 0
    for step in range(1, 201):
        now += int(rng.integers(-100, 300))
        subjects, keys, ts = random_batch(rng, now, int(rng.integers(1, 30)))
        charge = ledger.charge(3, subjects=subjects, keys=keys, timestamps_ms=ts, now_ms=now)
        caps.add(subjects, ts, charge.admitted.tolist())
        suppressed += charge.reasons.count("budget_exhausted")
        log.extend(charge.updates)
        kept, snapshot = compacted(log), ledger.snapshot(3)
        if step % 25 == 1:  # the first charge after a restart
            closed = struct.unpack(">q", kept[b"\x01E"])[0]
            assert min(window_starts(kept), default=closed) >= closed, "a closed window's record"
        assert set(snapshot) <= set(kept)
        for key, value in snapshot.items():
            if key[:2] in (b"\x01W", b"\x01L"):
                held = np.frombuffer(value, ">i8")
                assert (held >= np.frombuffer(kept[key], ">i8")).all(), key
            else:
                assert value == kept[key]
        if step % 25 == 0:
            # under the same hash, a restore is the ledger, plus the subjects that shared a
            # row from a later batch (put does not notice them: spending), at the row's value
            twin = SubjectLedger(policy=policy, deployment="tests")
            twin.restore(3, kept.items())
            again = twin.snapshot(3)
            assert {key: again[key] for key in snapshot} == snapshot
            assert twin.counts(3) == ledger.counts(3)
            hashes.identity = IDENTITIES[step // 25 % len(IDENTITIES)]
            counts, ledger = ledger.counts(3), SubjectLedger(policy=policy, deployment="tests")
            ledger.restore(3, kept.items())
            assert ledger.counts(3) == counts
            log = list(kept.items())
    caps.check()
    assert suppressed > 50, "the caps were never reached"

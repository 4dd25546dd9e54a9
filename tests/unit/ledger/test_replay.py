"""A restore folds the changelog as it reads it: the same ledger, without the records' memory."""

from __future__ import annotations

import gc
import struct
import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest
from privstream.ledger import SubjectLedger, codec
from privstream.ledger.core import RESTORE_BATCH

from tests.unit.ledger.test_charge import POLICY
from tests.unit.ledger.test_collisions import Hashes

Log = list[tuple[bytes, bytes | None]]
#: a restore's peak above the ledger it keeps: one fetched batch of records and their
#: Python objects (far less than 400 bytes a record) ...
BATCH_ALLOWANCE = RESTORE_BATCH * 400
#: ... plus half of the kept tables: a table that doubles holds its old arrays (half the
#: new ones) until the new ones are filled
GROWTH_SHARE = 0.5


def window_key(start: int, subject: bytes, length: int = POLICY.window_ms) -> bytes:
    return codec.window_prefix(start, length) + subject


def spent(eps: int, delta: int = 0) -> bytes:
    return struct.pack(">qq", eps, delta)


def every_subject_twice(subjects: int) -> Iterator[tuple[bytes, bytes | None]]:
    """2 x ``subjects`` window records made on the fly (the input is not held either)."""
    for spending in (1, 2):
        for i in range(subjects):
            yield window_key(0, b"subject-%09d" % i), spent(spending)


def test_a_restore_keeps_no_python_object_per_record() -> None:
    """tracemalloc counts Python objects and numpy's arrays alike. Over 600,000 records
    (300,000 subjects, each twice), the restore's peak above what it keeps stays within
    one batch and the tables' growth: 9.6 MB measured, against a bound of 20.3 MB. The
    replay it replaces held a dictionary entry, a key and a value per record until the
    end: 76 MB above what it kept (127 bytes a record)."""
    subjects = 300_000
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        ledger = SubjectLedger(policy=POLICY, deployment="tests")
        ledger.restore(0, every_subject_twice(subjects))
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    kept = current - base
    assert ledger.active_subject_windows() == subjects
    assert ledger.snapshot(0)[window_key(0, b"subject-000000007")] == spent(2)  # the last
    assert kept < subjects * 200  # what the ledger keeps: no record either
    assert peak - base - kept <= GROWTH_SHARE * kept + BATCH_ALLOWANCE, (peak - base, kept)


def random_log(rng: np.random.Generator, records: int) -> Log:
    """Records of few subjects (repeats within a fetched batch), windows of two lengths,
    the lifetime, the scalars, and tombstones of held and of unknown keys."""
    log: Log = []
    for _ in range(records):
        subject = b"s%d" % rng.integers(0, 40)
        pick = rng.random()
        if pick < 0.6:
            start = int(rng.integers(0, 3)) * POLICY.window_ms
            key = window_key(start, subject)
        elif pick < 0.65:
            key = window_key(0, subject, length=2 * POLICY.window_ms)  # another length
        elif pick < 0.9:
            key = codec.lifetime_key(subject)
        else:
            key = [codec.CLOCK_KEY, codec.CLOSED_KEY][int(rng.integers(0, 2))]
        # non-negative, as the ledger writes them (a negative one reads as 0)
        width = 2 if key[1:2] == b"W" else 1
        value = None if rng.random() < 0.25 else rng.integers(0, 2**62, width).astype(">i8")
        log.append((key, None if value is None else value.tobytes()))
    return log


def foreign_tombstoned(log: Log) -> Log:
    """``log`` and then tombstones of its windows of another length (else refused)."""
    other = codec.window_prefix(0, 2 * POLICY.window_ms)
    return log + [(key, None) for key, _ in log if key.startswith(other)]


def kept(log: Log) -> dict[bytes, bytes]:
    """What a restore keeps of ``log`` (docs/ledger.md, "Stale writes"): a tombstone
    deletes; spending (``W``, ``L``) keeps each unit's largest value since the key's last
    tombstone, the closed past (``E``) its largest; the rest the last value."""
    into: dict[bytes, bytes] = {}
    for key, value in log:
        held = into.get(key)
        if value is None:
            into.pop(key, None)
        elif held is None or (key[1:2] not in (b"W", b"L") and key != codec.CLOSED_KEY):
            into[key] = value
        else:
            width = len(value) // 8
            old, new = struct.unpack(f">{width}q", held), struct.unpack(f">{width}q", value)
            into[key] = struct.pack(f">{width}q", *map(max, old, new))
    return into


@pytest.mark.parametrize("seed", range(8))
def test_folding_in_any_batches_gives_what_the_changelog_keeps(seed: int) -> None:
    rng = np.random.default_rng(seed)
    # charged under the lifetime cap from the start (``K``), as POLICY has one
    log = [(codec.LIFETIME_KEPT, codec.MARK), *foreign_tombstoned(random_log(rng, 2_000))]
    ledger = SubjectLedger(policy=POLICY, deployment="tests")
    replaying = ledger.replay(5)
    at = 0
    while at < len(log):  # batches of 1 to 300 records, as a fetch cuts them
        step = int(rng.integers(1, 300))
        keys, values = zip(*log[at : at + step], strict=True)
        replaying.add(list(keys), list(values))
        at += step
    ledger.restored(replaying)
    assert replaying.records == len(log)
    assert ledger.snapshot(5) == kept(log)


def test_a_window_tombstoned_whole_is_dropped_and_can_start_again() -> None:
    ledger = SubjectLedger(policy=POLICY, deployment="tests")
    a, b = window_key(0, b"a"), window_key(0, b"b")
    ledger.restore(0, [(a, spent(3)), (b, spent(6)), (a, None), (b, None), (b, spent(9))])
    assert ledger.snapshot(0) == {b: spent(9)}
    ledger.restore(0, [(a, spent(3)), (a, None), (b, None)])
    assert ledger.snapshot(0) == {}
    assert ledger.active_subject_windows() == 0


def test_a_negative_spending_reads_as_zero() -> None:
    """Never written by the ledger; a restore has always read it as nothing spent."""
    ledger = SubjectLedger(policy=POLICY, deployment="tests")
    key = window_key(0, b"a")
    ledger.restore(0, [(key, spent(-5, 7))])
    assert ledger.snapshot(0) == {key: spent(0, 7)}


def test_colliding_subjects_keep_their_own_largest_values_and_share_the_larger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``alice`` and ``bob`` share a slot (lengths 5 and 3, both odd, under the forced
    hash): each keeps its own largest record, and the ledger charges both at the larger."""
    Hashes(monkeypatch)  # odd lengths collide
    alice, bob = window_key(0, b"alice"), window_key(0, b"bob")
    log: Log = [(alice, spent(9)), (bob, spent(3)), (alice, spent(2)), (bob, spent(4))]
    ledger = SubjectLedger(policy=POLICY, deployment="tests")
    ledger.restore(0, log)
    assert ledger.snapshot(0) == {alice: spent(9), bob: spent(9)}
    ledger.restore(0, [*log, (alice, None)])  # alice's tombstone leaves bob alone
    assert ledger.snapshot(0) == {bob: spent(4)}

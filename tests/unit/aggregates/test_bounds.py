"""``_bounds.c`` (the batch path's unit numbers and subject bounds) against Python oracles.

Collisions are constructed: a row holding another unit's bytes under the very hash of a
new unit (a full 64-bit collision), home rows shared by every key (multiplier 1 in a
small table), so each probe walks a run of rows. Deterministic: fixed seeds, no noise.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from privstream.aggregates import _bounds
from privstream.aggregates.bounding import HashRows, SubjectBounds

FREE = -1


def _table(rows: int) -> np.ndarray:
    return np.full((rows, 2), FREE, np.int64)


def _intern(table: np.ndarray, keys: list[bytes], units: list[bytes | None], mix: int) -> list[int]:
    ids = np.empty(len(units), np.int64)
    _bounds.intern(table, keys, units, ids, mix)
    return ids.tolist()


def _oracle_ids(units: list[bytes | None]) -> list[int]:
    seen: dict[bytes, int] = {}
    return [-1 if u is None else seen.setdefault(u, len(seen)) for u in units]


def test_a_unit_whose_hash_a_row_holds_for_other_bytes_gets_its_own_id() -> None:
    """A full collision, constructed: b"x"'s home row holds its very hash, naming b"y"."""
    table, keys = _table(8), [b"y"]
    table[(hash(b"x") % 2**64) >> 61] = (hash(b"x"), 0)  # multiplier 1: the top 3 bits
    assert _intern(table, keys, [b"x", b"x"], 1) == [1, 1]
    assert keys == [b"y", b"x"]


def test_units_sharing_their_home_row_probe_on_to_their_own() -> None:
    """Multiplier 1 in 128 rows: the home row is the hash's top 7 bits; 20 units picked to
    share one home row walk a run of 20 rows, and keep distinct, stable ids."""
    shared = [u for u in (f"s{i}".encode() for i in range(100_000)) if hash(u) % 2**64 >> 57 == 5]
    units: list[bytes | None] = [*shared[:20], None, *reversed(shared[:20]), *shared[:20]]
    table, keys = _table(128), []
    assert _intern(table, keys, units, 1) == _oracle_ids(units)
    assert keys == shared[:20]


@pytest.mark.parametrize("seed", range(5))
def test_interned_ids_match_a_dict_across_calls_and_growth(seed: int) -> None:
    """Hostile bytes (NUL inside, non-ASCII, empty, one byte apart), random batches,
    the table grown between them as ``HashRows`` does."""
    rng = random.Random(seed)
    pool = [b"", b"\x00", b"a", b"a\x00", b"a\x00b", b"a\x00c", "é".encode(), "e\u0301".encode()]
    pool += ["日本".encode(), b"\xff\xfe", b"7", b"-1", b"18446744073709551615"]
    pool += [f"u{i}".encode() for i in range(300)]
    rows, keys = HashRows(), []
    expected: dict[bytes, int] = {}
    for _ in range(20):
        units = [rng.choice([*pool, None]) for _ in range(rng.randrange(0, 200))]
        rows.room(len(keys), len(units))
        got = _intern(rows.rows, keys, units, rows.mix)
        want = [-1 if u is None else expected.setdefault(u, len(expected)) for u in units]
        assert got == want
    assert keys == list(expected)


def test_intern_refuses_what_it_cannot_number_and_changes_nothing() -> None:
    table, keys = _table(8), []
    with pytest.raises(TypeError, match="unit 1 is a str; give bytes"):
        _intern(table, keys, [b"a", "a"], 1)
    with pytest.raises(TypeError, match="unit 0 is a bytearray"):
        _intern(table, keys, [bytearray(b"a")], 1)
    assert keys == [] and (table == FREE).all()  # checked before the first row is written
    with pytest.raises(ValueError, match="could exceed half of 8 rows; grow the table first"):
        _intern(table, keys, [b"a"] * 5, 1)
    with pytest.raises(ValueError, match="mix 2 is even"):
        _intern(table, keys, [b"a"], 2)
    with pytest.raises(ValueError, match="a power of two"):
        _intern(_table(6), keys, [b"a"], 1)
    with pytest.raises(ValueError, match="int64 rows"):
        _intern(np.full((8, 2), -1, np.int32), keys, [b"a"], 1)


def test_intern_refuses_a_row_naming_a_unit_keys_lacks() -> None:
    table, keys = _table(8), [b"a"]
    table[:] = (hash(b"b"), 5)  # every row: b"b"'s hash, a unit keys never had
    with pytest.raises(ValueError, match=r"names unit 5, which keys \(1 units\) does not hold"):
        _intern(table, keys, [b"b"], 1)


def _oracle_verdicts(
    subjects: list[int], cells: list[int], groups: int, records: int
) -> list[bool]:
    """``Accumulator._admit``'s rule, record by record."""
    cells_of: dict[int, set[int]] = {}
    kept: dict[tuple[int, int], int] = {}
    out = []
    for s, c in zip(subjects, cells, strict=True):
        held = cells_of.setdefault(s, set())
        ok = (c in held or len(held) < groups) and kept.get((s, c), 0) < records
        if ok:
            held.add(c)
            kept[s, c] = kept.get((s, c), 0) + 1
        out.append(ok)
    return out


@pytest.mark.parametrize(("groups", "records"), [(1, 1), (1, 2), (2, 2), (3, 1), (5, 4)])
def test_admit_keeps_each_subjects_first_cells_and_records_across_batches(
    groups: int, records: int
) -> None:
    rng = random.Random(groups * 10 + records)
    subjects = [rng.randrange(40) for _ in range(3000)]
    cells = [rng.randrange(6) for _ in range(3000)]
    bounds = SubjectBounds(groups, records)
    got: list[bool] = []
    start = 0
    while start < len(subjects):  # batches of random sizes, a subject in many of them
        end = start + rng.randrange(0, 300)
        got += bounds.admit(
            np.array(subjects[start:end], np.int64), np.array(cells[start:end], np.int64), 40
        ).tolist()
        start = end
    assert got == _oracle_verdicts(subjects, cells, groups, records)


def test_pairs_sharing_their_home_row_are_bounded_exactly() -> None:
    """Multiplier 1 in 4096 rows: a pair's home row is its subject's top bits, so every
    pair of subjects below 2^20 starts at row 0 and probes a run of up to 200 rows."""
    rng = random.Random(7)
    subjects = [rng.randrange(50) for _ in range(2000)]
    cells = [rng.randrange(4) for _ in range(2000)]
    table, used = _table(4096), np.zeros(50, np.int32)
    verdicts = np.zeros(len(subjects), np.uint8)
    held = _bounds.admit(table, used, np.array(subjects), np.array(cells), verdicts, 0, 2, 3, 1)
    assert verdicts.astype(bool).tolist() == _oracle_verdicts(subjects, cells, 2, 3)
    kept = {(s, c) for s, c, v in zip(subjects, cells, verdicts.tolist(), strict=True) if v}
    assert held == int((table[:, 1] != FREE).sum()) == len(kept)


def test_admit_refuses_subjects_and_cells_out_of_range_before_any_verdict() -> None:
    table, used = _table(16), np.zeros(2, np.int32)
    verdicts = np.zeros(2, np.uint8)
    for subjects, cells in (([0, 2], [0, 0]), ([0, -1], [0, 0]), ([0, 0], [0, 2**32])):
        with pytest.raises(ValueError, match="record 1 has subject"):
            _bounds.admit(table, used, np.array(subjects), np.array(cells), verdicts, 0, 1, 1, 1)
    with pytest.raises(ValueError, match="verdicts a uint8 array"):
        _bounds.admit(table, used, np.array([0]), np.array([0]), np.zeros(1, bool), 0, 1, 1, 1)
    with pytest.raises(ValueError, match="could exceed half of 16 rows"):
        _bounds.admit(table, used, np.zeros(9, np.int64), np.zeros(9, np.int64),
                      np.zeros(9, np.uint8), 0, 1, 1, 1)  # fmt: skip


def test_rehash_keeps_every_row_and_refuses_a_small_or_used_table() -> None:
    rows = HashRows()
    keys: list[bytes] = []
    units: list[bytes | None] = [f"k{i}".encode() for i in range(1000)]
    rows.room(0, len(units))
    first = _intern(rows.rows, keys, units, rows.mix)
    rows.room(len(keys), 5000)  # grown: every unit keeps its id
    assert _intern(rows.rows, keys, units, rows.mix) == first
    with pytest.raises(ValueError, match="could exceed half"):
        _bounds.rehash(rows.rows, _table(1024), rows.mix)
    with pytest.raises(ValueError, match=r"rehash: no free row .* the table is corrupt"):
        _bounds.rehash(rows.rows, np.zeros((4096, 2), np.int64), rows.mix)


def test_may_disagree_names_the_lines_with_19_digits_or_a_3_digit_exponent() -> None:
    lines = [b'{"a": 1}', b'{"b": 1%s}' % (b"0" * 18), b"1234567890.123456789", b"1e999"]
    lines += [b"-123456789012345678e99", b"0" * 18, b"1E-099", b"1e+99", b"x1.5e0309"]
    assert _bounds.may_disagree(lines) == [1, 2, 3, 6, 8]
    assert _bounds.may_disagree([b"0" * 18, b"1" * 18]) == []  # never across lines
    assert _bounds.may_disagree([]) == []
    with pytest.raises(TypeError, match="line 1 is a str; give bytes"):
        _bounds.may_disagree([b"1", "2"])


def test_may_disagree_agrees_with_a_regular_expression() -> None:
    """Random lines of digits, points, exponent marks and other bytes."""
    rng = random.Random(19)
    pattern = re.compile(rb"(?:[0-9]\.*){18}[0-9]|[eE][+-]?[0-9]{3}")
    for _ in range(20_000):
        line = bytes(rng.choice(b"0123456789999x..eE+-") for _ in range(rng.randrange(0, 60)))
        expected = [1] if pattern.search(line) else []
        assert _bounds.may_disagree([b"{}", line]) == expected, line

"""``Spending`` (the C hash table ``_slots.c`` and its rows) against a dict, through growth
and hash collisions, and what it refuses."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from privstream.errors import MisuseError
from privstream.ledger.spending import Spending, hashes


class Model:
    """What a ``Spending`` holds, kept in dicts: a row per key, the first name of each key,
    and the names known to write to a key (subjects whose keys collide share the row):
    ``put`` names a new key only, ``merge`` also learns the other names of a held key."""

    def __init__(self) -> None:
        self.rows: dict[int, list[int]] = {}
        self.first: dict[int, bytes] = {}
        self.names: dict[bytes, int] = {}

    def write(self, keys: list[int], names: list[bytes], rows: list[list[int]], *, most: bool):
        for key, name, row in zip(keys, names, rows, strict=True):
            if most or key not in self.first:
                self.names.setdefault(name, key)
            self.first.setdefault(key, name)
            old = self.rows.get(key)
            if most and old:
                row = [max(a, b) for a, b in zip(old, row, strict=True)]
            self.rows[key] = row


def test_spending_equals_a_dict_through_growth_and_collisions() -> None:
    """put (distinct keys) and merge (keys repeat) interleaved; 2,000 subjects on 1,500
    keys, so many share one; batches up to 6x the table; every growth must keep each
    (key, slot, row, name)."""
    rng = np.random.default_rng(3)
    spending, model = Spending(width=2), Model()
    collide = rng.integers(-(2**63), 2**63 - 1, 1_500, dtype=np.int64)
    collide[collide == -1] = 0
    for step in range(300):
        pool = rng.integers(0, 2_000, int(rng.integers(1, 100 if step else 50)))
        names = list(dict.fromkeys(b"s%d" % i for i in pool.tolist()))
        keys = collide[[int(n[1:]) % 1_500 for n in names]]
        if step % 3:  # put: one subject per key
            first = dict(zip(keys.tolist(), names, strict=True))
            names, keys = list(first.values()), np.array(list(first), dtype=np.int64)
        held = spending.get(keys)  # a copy: no growth may change it
        snapshot = held.copy()
        assert held.tolist() == [model.rows.get(k, [0, 0]) for k in keys.tolist()]
        new = held + rng.integers(0, 5, (len(names), 2))
        if step % 3:
            spending.put(keys, names, new)
        else:
            spending.merge(keys, names, new)
        model.write(keys.tolist(), names, new.tolist(), most=not step % 3)
        assert (held == snapshot).all()
        assert len(spending) == len(model.rows)
    assert len(spending) > 1_000 and len(spending.aliases) > 100
    assert spending.names == list(model.first.values())
    assert sorted(spending.every_name()) == sorted(model.names)
    expected = {name: model.rows[key] for name, key in model.names.items()}
    assert {name: row.tolist() for name, row in spending.items()} == expected


def test_absent_keys_read_zero_and_are_not_held() -> None:
    spending = Spending(width=1)
    spending.put(np.array([10, 20]), [b"a", b"b"], np.array([[4], [5]]))
    assert spending.get(np.array([20, 30, 10, 40])).tolist() == [[5], [0], [4], [0]]
    assert len(spending) == 2 and spending.names == [b"a", b"b"] and not spending.aliases


def test_colliding_keys_are_one_subject_and_merge_keeps_the_largest() -> None:
    # names that share a key (a hash collision) share one row: charged for both
    spending = Spending(width=2)
    spending.merge(np.array([7, 7, 9]), [b"a", b"b", b"c"], np.array([[1, 9], [3, 2], [5, 5]]))
    assert spending.get(np.array([7, 9])).tolist() == [[3, 9], [5, 5]]
    assert spending.names == [b"a", b"c"]  # the first name seen names the row
    assert spending.aliases == {b"b": 0}
    # a later write by either name moves the one row; every name keeps it
    spending.put(np.array([7]), [b"b"], np.array([[4, 9]]))
    spending.put(np.array([9]), [b"d"], np.array([[5, 6]]))  # put looks for no alias
    assert spending.aliases == {b"b": 0}
    assert dict(spending.items()).keys() == {b"a", b"b", b"c"}
    assert {n: r.tolist() for n, r in spending.items()} == {
        b"a": [4, 9],
        b"b": [4, 9],
        b"c": [5, 6],
    }
    assert spending.every_name() == [b"a", b"c", b"b"]


def test_keys_that_share_a_home_row_probe_past_each_other() -> None:
    spending = Spending(width=1)
    mix = spending._mix
    inverse = pow(mix, -1, 2**64)
    # key * mix = 2**60 * 3 + i: one home row (the top bits) in any table of up to 2**60
    home = [((3 << 60) + i) * inverse % 2**64 for i in range(40)]
    keys = np.array(home, dtype=np.uint64).astype(np.int64)
    spending.put(keys[:7], [b"%d" % i for i in range(7)], np.arange(7)[:, None])
    assert spending.get(keys[:7][::-1]).ravel().tolist() == list(range(7))[::-1]
    assert spending.get(keys[7:8]).tolist() == [[0]]
    spending.put(keys, [b"%d" % i for i in range(40)], np.arange(40)[:, None])  # grows
    assert spending.get(keys).ravel().tolist() == list(range(40))


def longest_run(spending: Spending) -> int:
    """The longest run of held rows in the table (a probe may walk all of it)."""
    held = np.r_[False, spending._table[:, 0] != -1, False].astype(np.int8)
    edges = np.flatnonzero(np.diff(held))
    return int((edges[1::2] - edges[::2]).max(initial=0))


def test_keys_crafted_to_share_their_low_bits_spread_over_the_table() -> None:
    """A writer who knows the hash key (PYTHONHASHSEED fixed) can make subjects whose
    hashes share their low bits for about 2**bits hash evaluations each, but not choose
    the rest. Homed by their low bits, such keys formed one run of rows and every probe
    walked it (quadratic: 60,000 of them took 1.3 s and growing). Homed by the top bits
    of key * mix, the run stays short.

    The seeds fix mix and keys, so the test is deterministic. Were home rows uniform, a
    run of 150 rows at load 20,000 / 65,536 = 0.31 would need 150 keys homed in 150 rows
    (mean 46): Chernoff gives at most e^(-0.37 * 150) per start, under 1e-19 over the
    table. Multiply-shift is only universal (two keys share a home row with probability
    at most 2 / capacity), so the bound is a guide and this seed's run is the evidence."""
    rng = np.random.default_rng(11)
    spending = Spending(width=1)
    spending._mix = int(rng.integers(0, 2**63)) * 2 + 1
    high = rng.integers(0, 2**43, 20_000, dtype=np.int64)
    keys = (high << 20) | 0xABCDE  # every key ends in the same 20 bits
    for part in np.array_split(np.arange(20_000), 4):
        spending.put(keys[part], [b"%d" % i for i in part.tolist()], part[:, None])
    assert len(spending._table) == 65_536
    assert spending.get(keys).ravel().tolist() == list(range(20_000))
    assert longest_run(spending) < 150


def test_refusals_change_nothing() -> None:
    spending = Spending(width=2)
    spending.put(np.array([5]), [b"a"], np.array([[1, 2]]))
    table, rows = spending._table.copy(), spending.rows.copy()
    bad = [
        (np.array([6, 7]), [b"b"], np.zeros((2, 2), np.int64)),  # a name short
        (np.array([6, 7]), [b"b", b"c"], np.zeros((1, 2), np.int64)),  # a row short
        (np.array([6]), [b"b"], np.zeros((1, 3), np.int64)),  # rows too wide
        (np.array([6.0]), [b"b"], np.zeros((1, 2), np.int64)),  # keys not integers
        (np.array([[6]]), [b"b"], np.zeros((1, 2), np.int64)),  # keys not 1-d
    ]
    for keys, names, new in bad:
        for write in (spending.put, spending.merge):
            with pytest.raises(MisuseError, match="Spending"):
                write(keys, names, new)
    assert (spending._table == table).all() and (spending.rows == rows).all()
    assert spending.names == [b"a"] and not spending.aliases


def test_keys_of_other_integer_dtypes_and_layouts_are_taken_as_int64() -> None:
    spending = Spending(width=1)
    raw = np.zeros(8 * 3 + 1, dtype=np.uint8)
    unaligned = raw[1:].view(np.int64)  # numpy makes these; C must not load them as is
    unaligned[:] = [2**40, -5, 3]
    spending.put(unaligned, [b"a", b"b", b"c"], np.array([[1], [2], [3]]))
    as_uint = np.array([2**64 - 5], dtype=np.uint64)  # the same 64 bits as -5
    assert spending.get(as_uint).tolist() == [[2]]
    strided = np.array([3, 0, 2**40], dtype=np.int64)[::-2]
    assert spending.get(strided).tolist() == [[1], [3]]
    assert spending.get(np.array([3], dtype=np.int8)).tolist() == [[3]]
    with pytest.raises(ValueError, match="a key of -1"):
        spending.get(np.array([2**64 - 1], dtype=np.uint64))


def test_hashes_are_the_subjects_hash_and_never_the_free_row() -> None:
    names = [b"", b"a", bytes(range(256)), b"x" * 10_000]
    assert hashes(names).tolist() == [hash(n) for n in names]
    assert hashes([]).dtype == np.int64 and len(hashes([])) == 0


def test_one_batch_far_larger_than_the_table() -> None:
    """300,000 new keys into a table of 16 rows: one growth to 2**20 rows, slots in order."""
    rng = np.random.default_rng(8)
    keys = np.unique(rng.integers(-(2**63), 2**63 - 1, 300_000, dtype=np.int64))
    keys = keys[keys != -1]
    rng.shuffle(keys)
    spending = Spending(width=1)
    names = [b"%d" % i for i in range(len(keys))]
    spending.put(keys, names, np.arange(len(keys))[:, None])
    assert len(spending._table) == 2**20 and spending.names == names
    assert (spending.get(keys[::-1]).ravel() == np.arange(len(keys))[::-1]).all()
    absent = np.setdiff1d(rng.integers(0, 2**63 - 1, 10_000, dtype=np.int64), keys)
    assert not spending.get(absent).any()


def test_each_slot_names_its_first_subject_across_inserts() -> None:
    # names are kept joined per insert: every slot's own bytes, of any length, come back
    spending = Spending(width=1)
    rng = np.random.default_rng(11)
    expected: list[bytes] = []
    for _ in range(50):
        names = [
            rng.bytes(int(rng.integers(0, 9))) + b"%d" % len(expected + [b""] * i)
            for i in range(int(rng.integers(1, 40)))
        ]
        keys = np.arange(len(expected), len(expected) + len(names), dtype=np.int64)
        spending.put(keys, names, np.zeros((len(names), 1), dtype=np.int64))
        expected.extend(names)
    assert spending.names == expected
    assert [spending.name(slot) for slot in range(len(expected))] == expected


@pytest.mark.parametrize(
    ("names", "lengths", "error"),
    [
        ([b"b", "c"], None, TypeError),  # a str among the names
        ([b"bb", b"c"], [1, 1], MisuseError),  # lengths two bytes short
        ([b"bb", b"c"], [4, -1], MisuseError),  # adding up, one negative
    ],
)
def test_a_refused_name_or_length_leaves_no_key_behind(
    names: list[Any], lengths: list[int] | None, error: type[Exception]
) -> None:
    """The table takes the keys before the names are joined: a name that is not bytes, or
    lengths that do not add up, must not leave keys at slots a later insert hands out
    again (two subjects on one row, each ``put`` overwriting the other's spending)."""
    spending = Spending(width=1)
    spending.put(np.array([5]), [b"a"], np.array([[1]]))
    given = None if lengths is None else np.array(lengths, dtype=np.int64)
    with pytest.raises(error):
        spending.put(np.array([6, 7]), names, np.array([[2], [3]]), given)
    assert len(spending) == 1 and spending.names == [b"a"]
    spending.put(np.array([8, 9]), [b"d", b"e"], np.array([[4], [5]]))
    assert spending.get(np.array([5, 6, 7, 8, 9])).ravel().tolist() == [1, 0, 0, 4, 5]
    assert spending.names == [b"a", b"d", b"e"]


def test_name_and_names_on_every_part_boundary() -> None:
    """Parts of one name, of many, empty names, 1- and 1024-byte names, and inserts that
    take only some of their keys (the rest held): each slot, first and last of its part,
    gives back its own subject."""
    spending = Spending(width=1)
    rng = np.random.default_rng(12)
    expected: dict[int, bytes] = {}  # key -> the name it was first put with
    for step in range(300):
        size = int(rng.choice([1, 2, 3, 40]))
        keys = rng.choice(2_000, size, replace=False).astype(np.int64)
        lengths = rng.choice([0, 1, 2, 1024], size)
        names = [bytes([step % 251]) * int(n) for n in lengths]
        names = [n + b"%d" % k if step % 5 else n for n, k in zip(names, keys, strict=True)]
        spending.put(keys, names, np.zeros((size, 1), np.int64))
        for key, name in zip(keys.tolist(), names, strict=True):
            expected.setdefault(key, name)
    by_slot = list(expected.values())  # dicts keep the order keys were first seen
    assert spending.names == by_slot
    assert [spending.name(slot) for slot in range(len(by_slot))] == by_slot
    assert len(spending._firsts) > 100, "too few parts to test their boundaries"


def test_merge_takes_a_name_as_given_only_when_each_key_is_new_and_its_own() -> None:
    """``merge`` skips the name look-up when the size grows by every key: a key twice in
    one call, or a held key next to a new one, must still make the later subjects aliases."""
    spending = Spending(width=1)
    spending.merge(np.array([5, 5]), [b"a", b"b"], np.array([[1], [2]]))  # grows by 1 of 2
    assert spending.names == [b"a"] and spending.aliases == {b"b": 0}
    spending.merge(np.array([5, 6]), [b"c", b"d"], np.array([[3], [4]]))  # grows by 1 of 2
    assert spending.names == [b"a", b"d"] and spending.aliases == {b"b": 0, b"c": 0}
    spending.merge(np.array([7, 8, 7]), [b"e", b"f", b"g"], np.array([[1], [1], [9]]))
    assert spending.names == [b"a", b"d", b"e", b"f"]
    assert spending.aliases == {b"b": 0, b"c": 0, b"g": 2}
    assert {name: row.tolist() for name, row in spending.items()} == {
        b"a": [3],
        b"b": [3],
        b"c": [3],
        b"d": [4],
        b"e": [9],
        b"f": [1],
        b"g": [9],
    }

"""``Spending`` (the C hash table ``_slots.c`` and its rows) against a dict, and the table's
refusals: a bad call must raise, never write outside its arrays or loop forever."""

from __future__ import annotations

import numpy as np
import pytest
from privstream.ledger import _slots
from privstream.ledger.spending import Spending, hashes


def test_spending_equals_a_dict_through_growth() -> None:
    rng = np.random.default_rng(3)
    spending, reference = Spending(width=2), {}
    for _ in range(400):
        pool = rng.integers(0, 6_000, int(rng.integers(1, 300)))
        names = list(dict.fromkeys(b"s%d" % i for i in pool.tolist()))
        keys = hashes(names)
        expected = [reference.get(name, [0, 0]) for name in names]
        assert spending.get(keys).tolist() == expected
        new = spending.get(keys) + rng.integers(0, 5, (len(names), 2))
        spending.put(keys, names, new)
        reference.update(zip(names, new.tolist(), strict=True))
    assert len(spending) == len(reference) > 4_000  # grew from 16 rows many times
    assert {name: row.tolist() for name, row in spending.items()} == reference


def test_absent_keys_read_zero_and_are_not_held() -> None:
    spending = Spending(width=1)
    spending.put(np.array([10, 20]), [b"a", b"b"], np.array([[4], [5]]))
    assert spending.get(np.array([20, 30, 10, 40])).tolist() == [[5], [0], [4], [0]]
    assert len(spending) == 2 and spending.names == [b"a", b"b"]


def test_colliding_keys_are_one_subject_and_merge_keeps_the_largest() -> None:
    # names that share a key (a hash collision) share one row: charged for both
    spending = Spending(width=2)
    spending.merge(np.array([7, 7, 9]), [b"a", b"b", b"c"], np.array([[1, 9], [3, 2], [5, 5]]))
    assert spending.get(np.array([7, 9])).tolist() == [[3, 9], [5, 5]]
    assert spending.names == [b"a", b"c"]  # the first name seen names the row


def test_keys_that_share_a_home_row_probe_past_each_other() -> None:
    spending = Spending(width=1)
    keys = np.array([16 * i + 3 for i in range(7)], dtype=np.int64)  # one home row of 16
    spending.put(keys, [b"%d" % i for i in range(7)], np.arange(7)[:, None])
    assert spending.get(keys[::-1]).ravel().tolist() == list(range(7))[::-1]
    assert spending.get(np.array([16 * 7 + 3])).tolist() == [[0]]


def table(rows: int) -> np.ndarray:
    return np.full((rows, 2), -1, dtype=np.int64)


def call(t: np.ndarray, keys: list[int], size: int = 0, insert: bool = True) -> int:
    k = np.array(keys, dtype=np.int64)
    return _slots.find(t, k, np.empty(len(k), np.int64), np.empty(len(k), np.int64), size, insert)


def test_find_assigns_slots_in_first_seen_order_and_reports_the_new() -> None:
    t = table(8)
    keys = np.array([5, 13, 5, 7], dtype=np.int64)
    slots, firsts = np.empty(4, np.int64), np.empty(4, np.int64)
    assert _slots.find(t, keys, slots, firsts, 0, True) == 3
    assert slots.tolist() == [0, 1, 0, 2] and firsts[:3].tolist() == [0, 1, 3]
    assert _slots.find(t, keys[::-1].copy(), slots, firsts, 3, False) == 3
    assert slots.tolist() == [2, 0, 1, 0]
    assert call(t, [99, 5], size=3, insert=False) == 3


@pytest.mark.parametrize(
    ("rows", "keys", "size", "insert", "message"),
    [
        (8, [1, 2, 3, 4, 5], 0, True, "could exceed half"),  # 5 new keys in 8 rows
        (8, [1], 4, True, "could exceed half"),
        (8, [1], 5, False, "could exceed half"),  # a size no table of 8 holds
        (8, [1], -1, False, "could exceed half"),
        (6, [1], 0, True, "power of two"),
        (1, [1], 0, True, "power of two"),
        (8, [3, -1], 0, True, "a key of -1"),
    ],
)
def test_find_refuses_what_could_corrupt_the_table(
    rows: int, keys: list[int], size: int, insert: bool, message: str
) -> None:
    t = table(rows)
    with pytest.raises(ValueError, match=message):
        call(t, keys, size, insert)
    assert (t == -1).all(), "a refused call wrote to the table"


def test_find_refuses_arrays_of_other_lengths_and_non_contiguous_ones() -> None:
    k = np.array([1, 2], dtype=np.int64)
    with pytest.raises(ValueError, match="one length"):
        _slots.find(table(8), k, np.empty(1, np.int64), np.empty(2, np.int64), 0, True)
    with pytest.raises(ValueError, match="int64 rows"):
        _slots.find(
            np.full(15, -1, np.int8), k, np.empty(2, np.int64), np.empty(2, np.int64), 0, True
        )
    with pytest.raises(TypeError, match="read-write"):  # a strided view: not contiguous
        _slots.find(table(16)[::2], k, np.empty(2, np.int64), np.empty(2, np.int64), 0, True)
    with pytest.raises(TypeError, match="read-write"):
        _slots.find(bytes(128), k, np.empty(2, np.int64), np.empty(2, np.int64), 0, True)

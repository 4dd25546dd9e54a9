"""``groups.group`` (one dict, then ``np.unique`` only when an item repeats) against the
plain two-dict grouping it replaced."""

from __future__ import annotations

import random
from itertools import count

import numpy as np
import pytest
from privstream.ledger.groups import group


def two_dicts(items: list[bytes]) -> tuple[list[bytes], list[int]]:
    """The former grouping: distinct items in first-seen order, each item's index."""
    ids = dict(zip(dict.fromkeys(items), count(), strict=False))
    return list(ids), [ids[item] for item in items]


def cases() -> list[list[bytes]]:
    rng = random.Random(19)
    made: list[list[bytes]] = [[], [b""], [b"", b""], [b"a"] * 7, [b"b", b"a", b"b", b"a"]]
    for size in (2, 3, 10, 100, 2_000):
        for pool in (1, 2, size // 2 + 1, size, 10 * size):
            names = [rng.randbytes(rng.randint(0, 3)) + b"%d" % i for i in range(pool)]
            made.append([rng.choice(names) for _ in range(size)])
    return made


@pytest.mark.parametrize("items", cases(), ids=lambda c: f"{len(c)}-{len(set(c))}")
def test_group_equals_the_two_dict_grouping(items: list[bytes]) -> None:
    # equal bytes from distinct objects, as decoded subjects are
    items = [bytes(bytearray(item)) for item in items]
    names, inverse = group(items)
    expected_names, expected_inverse = two_dicts(items)
    assert names.dtype == object and names.ndim == 1
    assert names.tolist() == expected_names
    assert inverse.dtype == np.intp and inverse.shape == (len(items),)
    assert inverse.tolist() == expected_inverse
    # the distinct item objects are the first-seen ones (a store keeps those)
    firsts: dict[bytes, bytes] = {}
    for item in items:
        firsts.setdefault(item, item)
    assert all(a is firsts[a] for a in names.tolist())

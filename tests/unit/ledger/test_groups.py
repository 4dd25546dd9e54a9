"""``groups.group`` (``np.unique`` of the subjects' keys) against a plain dict grouping."""

from __future__ import annotations

import numpy as np
import pytest
from privstream.ledger.groups import group


def cases() -> list[list[int]]:
    rng = np.random.default_rng(19)
    made: list[list[int]] = [[], [0], [5, 5], [7] * 7, [2, 1, 2, 1], [-(2**63), 2**63 - 1]]
    for size in (2, 3, 10, 100, 2_000):
        for pool in (1, 2, size // 2 + 1, size, 10 * size):
            keys = rng.integers(-(2**63), 2**63 - 1, pool, dtype=np.int64)
            made.append(rng.choice(keys, size).tolist())
    return made


@pytest.mark.parametrize("keys", cases(), ids=lambda c: f"{len(c)}-{len(set(c))}")
def test_group_gives_first_positions_and_a_consistent_inverse(keys: list[int]) -> None:
    firsts, inverse = group(np.array(keys, dtype=np.int64))
    first_seen: dict[int, int] = {}
    for position, key in enumerate(keys):
        first_seen.setdefault(key, position)
    assert firsts.dtype == inverse.dtype == np.intp
    assert inverse.shape == (len(keys),)
    # one group per distinct key, each named by the key's first position
    assert sorted(firsts.tolist()) == sorted(first_seen.values())
    if len(first_seen) == len(keys):  # distinct: each item its own group, in input order
        assert firsts.tolist() == inverse.tolist() == list(range(len(keys)))
    # every item points at its key's group
    assert [keys[firsts[g]] for g in inverse.tolist()] == keys

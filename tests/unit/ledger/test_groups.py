"""``groups.group`` (``np.unique`` of the subjects' keys) against a plain dict grouping."""

from __future__ import annotations

import numpy as np
import pytest
from privstream.ledger.groups import group, within


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


@pytest.mark.parametrize("seed", range(6))
def test_within_admits_the_first_allowed_of_each_group(seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, int(rng.integers(1, 40)), int(rng.integers(0, 200)))
    firsts, inverse = group(keys.astype(np.int64))
    allowed = rng.integers(0, 6, len(firsts)) if seed % 2 else np.full(len(firsts), 10**6)
    seen: dict[int, int] = {}
    expected = []
    for g in inverse.tolist():
        seen[g] = seen.get(g, 0) + 1
        expected.append(seen[g] <= allowed[g])
    assert within(inverse, allowed.astype(np.int64)).tolist() == expected

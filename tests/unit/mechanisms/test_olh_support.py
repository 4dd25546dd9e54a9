"""Local hashing's support count in C (``_thresholds.support``) is the count it defines.

Every expected value comes from the release format itself, numpy's
``hash_to_bucket`` (``splitmix64(d XOR s) mod g``, a real remainder), compared
with ``==`` against the reported bucket: the C loop's divisibility test, blocks,
vector clones and two threads must give the same integers. The divisibility
test is also checked hash by hash against ``%``: ``unmix`` inverts splitmix64,
so a candidate digest can be made to hash (under seed 0) to any chosen word,
and one call with one report gives a 0/1 answer per chosen word. Last, the
refusals: ``support_counts`` raises ``MechanismError``, the C function
``ValueError`` (or ``OverflowError``/``TypeError`` for ``g``) before a write.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from privstream.errors import MechanismError
from privstream.mechanisms._thresholds import support
from privstream.mechanisms.local_hashing import (
    MAX_OTHER_BUCKETS,
    hash_to_bucket,
    splitmix64,
    support_counts,
    value_digests,
)

_TOP = 2**64 - 1
_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _unshift(x: int, shift: int) -> int:
    """The inverse of ``x ^ (x >> shift)`` on 64 bits."""
    out, step = x, shift
    while step < 64:
        out ^= x >> step
        step += shift
    return out


def unmix(h: int) -> int:
    """The word ``z`` with ``splitmix64(z) == h`` (each step of splitmix64 is invertible)."""
    z = _unshift(h, 31)
    z = _unshift(z * pow(_MIX2, -1, 2**64) % 2**64, 27)
    z = _unshift(z * pow(_MIX1, -1, 2**64) % 2**64, 30)
    return (z - _GOLDEN) % 2**64


def oracle(
    seeds: NDArray[np.uint64], buckets: NDArray[np.uint64], digests: NDArray[np.uint64], g: int
) -> NDArray[np.int64]:
    """The support counts from numpy's hash and remainder, n x k at once."""
    hashed = hash_to_bucket(seeds[None, :], digests[:, None], g)
    return np.asarray((hashed == buckets[None, :]).sum(axis=1), dtype=np.int64)


def reports(
    rng: np.random.Generator, n: int, digests: NDArray[np.uint64], g: int
) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """Random seeds; half the buckets the first candidate's own (counts far from 0)."""
    seeds = rng.integers(0, _TOP, n, dtype=np.uint64, endpoint=True)
    own = hash_to_bucket(seeds, digests[0], g)
    others = rng.integers(0, g - 1, n, dtype=np.uint64, endpoint=True)
    return seeds, np.where(rng.random(n) < 0.5, own, others).astype(np.uint64)


@pytest.mark.parametrize("g", [2, 3, 4, 8, 21, 56, 2_982, 2**31, 2**32 + 1])
@pytest.mark.parametrize("n", [0, 1, 2, 2_047, 2_049, 5_001])
def test_the_counts_equal_numpys_on_random_reports(g: int, n: int) -> None:
    """Record counts around the 2,048-record block and the two threads' split (odd n, one
    record: one thread gets none), g odd, even, a power of two and at the cap."""
    rng = np.random.default_rng([n, g])
    digests = value_digests([f"candidate-{i}" for i in range(37)])
    if n == 0:
        seeds = buckets = np.zeros(0, dtype=np.uint64)
    else:
        seeds, buckets = reports(rng, n, digests, g)
    got = support_counts(seeds, buckets, digests, g)
    assert got.dtype == np.int64
    assert np.array_equal(got, oracle(seeds, buckets, digests, g))
    if n > 1:
        assert got[0] >= n // 4  # the first candidate is supported: the test can fail


@pytest.mark.parametrize("g", [2, 5, 2**32 + 1])
def test_edge_seeds_and_the_top_bucket(g: int) -> None:
    """Seeds 0 and 2^64 - 1 with every report in bucket g - 1 and in its true bucket."""
    digests = value_digests([f"edge-{i}" for i in range(300)])
    seeds = np.array([0, _TOP] * 50, dtype=np.uint64)
    for buckets in (
        np.full(seeds.size, g - 1, dtype=np.uint64),
        hash_to_bucket(seeds, digests[7], g),
    ):
        got = support_counts(seeds, buckets, digests, g)
        assert np.array_equal(got, oracle(seeds, buckets, digests, g))
    assert got[7] == seeds.size


def test_unmix_inverts_splitmix64() -> None:
    words = [0, 1, _TOP, 2**63, 12345]
    mixed = splitmix64(np.array([unmix(w) for w in words], dtype=np.uint64))
    assert mixed.tolist() == words


def _hash_words(g: int, rng: np.random.Generator) -> list[int]:
    """Every hash in 0..4g and the last 4g words (at most 400 each), each of the first
    and last five multiples of g and 2^63's nearest, +-2, and 64 random words."""
    span = min(4 * g, 400)
    words = set(range(span + 1)) | {_TOP - i for i in range(span + 1)}
    top = _TOP // g * g
    multiples = [m * g for m in range(5)] + [top - m * g for m in range(5)] + [2**63 // g * g]
    words |= {m + d for m in multiples for d in range(-2, 3)}
    words |= set(rng.integers(0, _TOP, 64, dtype=np.uint64, endpoint=True).tolist())
    return sorted(w for w in words if 0 <= w <= _TOP)


def _bucket_test(g: int, buckets: list[int], rng: np.random.Generator) -> int:
    """For each bucket y: the C answer for every chosen hash h equals ``h % g == y``."""
    hashes = _hash_words(g, rng)
    digests = np.array([unmix(h) for h in hashes], dtype=np.uint64)  # seed 0: hash is h
    seeds = np.zeros(1, dtype=np.uint64)
    out = np.empty(len(hashes), dtype=np.int64)
    hits = 0
    for y in buckets:
        support(seeds, np.array([y], dtype=np.uint64), digests, g, out)
        assert out.tolist() == [int(h % g == y) for h in hashes], (g, y)
        hits += int(out.sum())
    return hits


def test_the_divisibility_test_is_the_remainder_for_every_small_g() -> None:
    """Every g in 1..96 (odd, powers of two, mixed) and every bucket below it."""
    rng = np.random.default_rng(96)
    for g in range(1, 97):
        assert _bucket_test(g, list(range(g)), rng) > 0


@pytest.mark.parametrize(
    "g", [2**32 + 1, 2**32, 3 * 2**40, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2, _TOP]
)
def test_the_divisibility_test_is_the_remainder_for_large_g(g: int) -> None:
    """g up to 2^64 - 1 (beyond what releases use): buckets 0, 1, the middle and g - 1."""
    rng = np.random.default_rng(g % 2**32)
    assert _bucket_test(g, [0, 1, g // 2, g - 1], rng) > 0


_GOOD: dict[str, Any] = {
    "seeds": np.zeros(3, dtype=np.uint64),
    "buckets": np.zeros(3, dtype=np.uint64),
    "digests": np.zeros(2, dtype=np.uint64),
    "g": 4,
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seeds": np.zeros(3, dtype=np.int64)}, "seeds must be a 1-D uint64 array, got int64"),
        ({"buckets": [0, 0, 0]}, "buckets must be a 1-D uint64 array, got list"),
        ({"digests": np.zeros((2, 1), dtype=np.uint64)}, r"of shape \(2, 1\)"),
        ({"digests": np.zeros(2, dtype=np.float64)}, "got float64"),
        ({"buckets": np.zeros(4, dtype=np.uint64)}, "3 seeds but 4 buckets"),
        ({"g": 1}, "g = 1 buckets is outside 2..4294967297"),
        ({"g": MAX_OTHER_BUCKETS + 2}, "outside 2..4294967297"),
        ({"buckets": np.array([0, 4, 1], dtype=np.uint64)}, "a bucket of 4 is not below g = 4"),
    ],
)
def test_support_counts_refuses_bad_arguments(change: dict[str, Any], message: str) -> None:
    with pytest.raises(MechanismError, match=message):
        support_counts(**{**_GOOD, **change})


def test_strided_columns_are_counted_not_refused() -> None:
    """A released (n, 2) array's columns are strided views: copied, then counted."""
    rng = np.random.default_rng(5)
    digests = value_digests(["a", "b", "c"])
    released = np.stack(reports(rng, 301, digests, 6), axis=1)
    seeds, buckets = released[:, 0], released[:, 1]
    assert not seeds.flags.c_contiguous
    got = support_counts(seeds, buckets, digests, 6)
    assert np.array_equal(got, oracle(seeds, buckets, digests, 6))


def _call(**change: Any) -> NDArray[np.int64]:
    """``support`` on small good arguments with ``change`` applied; out starts at 7."""
    args = {**_GOOD, "out": np.full(2, 7, dtype=np.int64), **change}
    support(args["seeds"], args["buckets"], args["digests"], args["g"], args["out"])
    out: NDArray[np.int64] = args["out"]
    return out


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"seeds": np.zeros(3, dtype=np.int64)}, ValueError, "seeds must hold native uint64"),
        ({"digests": np.zeros(2, dtype=np.uint32)}, ValueError, "digests must hold native uint64"),
        ({"buckets": np.zeros(2, dtype=np.uint64)}, ValueError, "3 seeds need as many buckets"),
        ({"buckets": np.array([0, 0, 4], dtype=np.uint64)}, ValueError, r"buckets\[2\] = 4"),
        ({"g": 0}, ValueError, "g must be at least 1"),
        ({"g": -1}, OverflowError, "negative"),
        ({"g": 2**64}, OverflowError, "too big"),
        ({"g": 4.0}, TypeError, "must be int, not float"),
        ({"g": np.int64(4)}, TypeError, "must be int, not numpy.int64"),
        ({"seeds": b"\x00" * 24}, ValueError, "seeds must hold native uint64"),
    ],
)
def test_the_c_function_refuses_before_a_write(
    change: dict[str, Any], error: type[Exception], message: str
) -> None:
    out = np.full(2, 7, dtype=np.int64)
    with pytest.raises(error, match=message):
        _call(**change, out=out)
    assert out.tolist() == [7, 7]


def test_the_c_function_refuses_a_wrong_out() -> None:
    with pytest.raises(ValueError, match="out must hold native int64"):
        _call(out=np.zeros(2, dtype=np.uint64))
    with pytest.raises(ValueError, match="2 digests as many out items"):
        _call(out=np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="read-only"):
        frozen = np.zeros(2, dtype=np.int64)
        frozen.flags.writeable = False
        _call(out=frozen)


def test_the_c_function_refuses_an_unaligned_seed_column() -> None:
    moved = np.frombuffer(bytearray(8 * 3 + 1), dtype=np.uint64, count=3, offset=1)
    with pytest.raises(ValueError, match="support: seeds must be aligned"):
        _call(seeds=moved)

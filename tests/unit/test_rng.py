"""Noise sources: the OS CSPRNG source, the word -> uniform map, the seeded test source."""

from __future__ import annotations

import numpy as np
import pytest

from service.mechanisms import OsEntropy
from service.mechanisms.rng import KeyedSource, derive_stream_key, uniforms, words_to_uniform
from service.testing import SeededSource


@pytest.mark.parametrize("n", [1, 7, 1000, 100_000])
def test_os_entropy_shape_dtype_and_open_interval(n: int) -> None:
    u = uniforms(OsEntropy(), n, 1)[:, 0]
    assert u.shape == (n,)
    assert u.dtype == np.float64
    assert np.all(u > 0.0)
    assert np.all(u < 1.0)


def test_os_entropy_zero_draws() -> None:
    u = uniforms(OsEntropy(), 0, 1)[:, 0]
    assert u.shape == (0,)
    assert u.dtype == np.float64


def test_os_entropy_two_calls_differ() -> None:
    # 52-bit uniforms: 16 equal draws by chance has probability 2**-832
    source = OsEntropy()
    assert not np.array_equal(uniforms(source, 16, 1)[:, 0], uniforms(source, 16, 1)[:, 0])


def test_os_entropy_values_within_a_call_are_distinct() -> None:
    # birthday bound: P(any collision among 10_000 52-bit values) < 1.2e-8
    u = uniforms(OsEntropy(), 10_000, 1)[:, 0]
    assert len(np.unique(u)) == len(u)


def test_word_zero_maps_to_half_an_ulp_above_zero() -> None:
    u = words_to_uniform(np.array([0], dtype=np.uint64))
    assert u[0] == 0.5 * 2.0**-52
    assert 0.0 < u[0] < 1.0
    assert np.isfinite(np.log(u[0]))


def test_low_twelve_bits_are_ignored() -> None:
    words = np.array([5 << 12, (5 << 12) | 0xFFF], dtype=np.uint64)
    u = words_to_uniform(words)
    assert u[0] == u[1] == (5 + 0.5) * 2.0**-52


def test_every_top_value_maps_exactly() -> None:
    # for every k < 2**52, (k + 0.5) * 2**-52 is exactly representable
    ks = np.array([0, 1, 2, 12345, 2**40 + 3, 2**51 + 1, 2**52 - 2, 2**52 - 1], dtype=np.uint64)
    u = words_to_uniform(ks << np.uint64(12))
    expected = [(int(k) + 0.5) / 2**52 for k in ks]
    assert u.tolist() == expected


def test_map_is_monotone() -> None:
    words = np.sort(np.random.default_rng(9).integers(0, 2**64, size=1000, dtype=np.uint64))
    u = words_to_uniform(words)
    assert np.all(np.diff(u) >= 0.0)


def test_all_ones_word_stays_strictly_below_one() -> None:
    words = np.array([2**64 - 1, 2**64 - 2**11], dtype=np.uint64)
    u = words_to_uniform(words)
    assert np.all(u < 1.0), u.tolist()
    assert np.all(np.isfinite(np.log1p(-u)))


def test_distinct_top_bits_give_distinct_uniforms() -> None:
    top = np.array([2**51 + 1, 2**51 + 2, 2**52 - 2, 2**52 - 1], dtype=np.uint64)
    u = words_to_uniform(top << np.uint64(12))
    assert len(np.unique(u)) == len(u), u.tolist()


def test_seeded_source_is_reproducible_and_seed_dependent() -> None:
    a = uniforms(SeededSource(42), 100, 1)[:, 0]
    b = uniforms(SeededSource(42), 100, 1)[:, 0]
    c = uniforms(SeededSource(43), 100, 1)[:, 0]
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert np.all((a > 0.0) & (a < 1.0))


# --- keyed, replay-stable source ------------------------------------------------------

SECRET = bytes(range(32))


def keyed(
    offsets: list[int], field: int = 0, topic: str = "raw", secret: bytes = SECRET
) -> KeyedSource:
    offs = np.asarray(offsets, dtype=np.int64)
    return KeyedSource(derive_stream_key(secret, topic), np.zeros_like(offs), offs, field)


def test_keyed_words_are_a_pure_function_of_key_and_coordinates() -> None:
    a = keyed([5, 6, 7]).words(3, 4)
    b = keyed([5, 6, 7]).words(3, 4)
    assert a.dtype == np.uint64 and a.shape == (3, 4)
    assert np.array_equal(a, b)


def test_keyed_words_do_not_depend_on_how_the_stream_is_batched() -> None:
    whole = keyed(list(range(10))).words(10, 3)
    halves = np.vstack([keyed(list(range(5))).words(5, 3), keyed(list(range(5, 10))).words(5, 3)])
    reordered = keyed([9, *range(9)]).words(10, 3)
    assert np.array_equal(whole, halves)
    assert np.array_equal(whole[9], reordered[0])


def test_keyed_words_differ_by_field_topic_key_and_partition() -> None:
    base = keyed([1, 2]).words(2, 2)
    assert not np.array_equal(base, keyed([1, 2], field=1).words(2, 2))
    assert not np.array_equal(base, keyed([1, 2], topic="other").words(2, 2))
    assert not np.array_equal(base, keyed([1, 2], secret=bytes(32)).words(2, 2))
    offs = np.array([1, 2], dtype=np.int64)
    other_partition = KeyedSource(derive_stream_key(SECRET, "raw"), offs * 0 + 3, offs, 0)
    assert not np.array_equal(base, other_partition.words(2, 2))


def test_keyed_prefix_is_stable_when_more_words_are_drawn() -> None:
    assert np.array_equal(keyed([3]).words(1, 3), keyed([3]).words(1, 5)[:, :3])


def test_keyed_uniforms_of_consecutive_offsets_look_independent() -> None:
    # Pearson correlation of 200k pairs (u_offset, u_offset+1): under independence it is
    # ~N(0, 1/200k); |r| > 0.0125 has probability ~2e-8 (5.6 sigma). Also mean and KS.
    n = 200_001
    u = words_to_uniform(keyed(list(range(n))).words(n, 1)[:, 0])
    r = np.corrcoef(u[:-1], u[1:])[0, 1]
    assert abs(r) < 0.0125
    assert abs(u.mean() - 0.5) < 0.004  # sd 0.00065: 6 sigma
    assert abs(np.sort(u) - (np.arange(n) + 0.5) / n).max() < 0.012  # KS, alpha ~ 1e-12


def test_keyed_source_checks_its_binding_and_key() -> None:
    with pytest.raises(ValueError, match="bound to 2 rows"):
        keyed([1, 2]).words(3, 1)
    with pytest.raises(ValueError, match="at least 32 bytes"):
        derive_stream_key(b"short", "raw")

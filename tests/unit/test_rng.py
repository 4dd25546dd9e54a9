"""Noise sources: the OS CSPRNG source, the word -> uniform map, the seeded test source."""

from __future__ import annotations

import numpy as np
import pytest

from service.mechanisms import OsEntropy
from service.mechanisms.rng import words_to_uniform
from service.testing import SeededSource


@pytest.mark.parametrize("n", [1, 7, 1000, 100_000])
def test_os_entropy_shape_dtype_and_open_interval(n: int) -> None:
    u = OsEntropy().uniform(n)
    assert u.shape == (n,)
    assert u.dtype == np.float64
    assert np.all(u > 0.0)
    assert np.all(u < 1.0)


def test_os_entropy_zero_draws() -> None:
    u = OsEntropy().uniform(0)
    assert u.shape == (0,)
    assert u.dtype == np.float64


def test_os_entropy_two_calls_differ() -> None:
    # 52-bit uniforms: 16 equal draws by chance has probability 2**-832
    source = OsEntropy()
    assert not np.array_equal(source.uniform(16), source.uniform(16))


def test_os_entropy_values_within_a_call_are_distinct() -> None:
    # birthday bound: P(any collision among 10_000 52-bit values) < 1.2e-8
    u = OsEntropy().uniform(10_000)
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
    a = SeededSource(42).uniform(100)
    b = SeededSource(42).uniform(100)
    c = SeededSource(43).uniform(100)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert np.all((a > 0.0) & (a < 1.0))

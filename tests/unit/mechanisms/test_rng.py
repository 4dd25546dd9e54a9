"""Noise sources: the OS CSPRNG source, the word -> uniform map, the seeded test source."""

from __future__ import annotations

import numpy as np
import pytest
from privstream.mechanisms import OsEntropy
from privstream.mechanisms.rng import (
    KeyedSource,
    NoiseKeys,
    derive_key,
    row_seeds,
    uniforms,
    words_to_uniform,
)
from privstream.testing import SeededSource


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
RELEASE = b"release-a"


def seeds(
    offsets: list[int],
    *,
    messages: list[bytes] | None = None,
    partition: int = 0,
    topic: str = "raw",
    secret: bytes = SECRET,
) -> np.ndarray:
    offs = np.asarray(offsets, dtype=np.int64)
    values = messages if messages is not None else [b'{"x":1}'] * len(offs)
    return row_seeds(NoiseKeys(secret, topic).row, np.full_like(offs, partition), offs, values)


def keyed(
    offsets: list[int], release: bytes = RELEASE, secret: bytes = SECRET, **kw: object
) -> KeyedSource:
    return KeyedSource(
        NoiseKeys(secret, "raw").field(release),
        seeds(offsets, secret=secret, **kw),  # type: ignore[arg-type]
    )


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


def test_keyed_words_differ_by_release_topic_key_partition_and_bytes() -> None:
    base = keyed([1, 2]).words(2, 2)
    assert not np.array_equal(base, keyed([1, 2], release=b"release-b").words(2, 2))
    assert not np.array_equal(base, keyed([1, 2], topic="other").words(2, 2))
    assert not np.array_equal(base, keyed([1, 2], secret=bytes(32)).words(2, 2))
    assert not np.array_equal(base, keyed([1, 2], partition=3).words(2, 2))
    other_bytes = keyed([1, 2], messages=[b'{"x":2}', b'{"x":1} ']).words(2, 2)
    assert not np.any(base == other_bytes)


def test_row_seed_depends_on_its_row_only() -> None:
    # the CBC-MAC runs column by column over the batch: a long neighbour (more blocks),
    # an empty one and a digested one (> 512 bytes) must not change a row's seed
    short = [b'{"a":1}']
    alone = seeds([7], messages=short)
    neighbours = [b"", b"x" * 100, b"y" * 5000, short[0]]
    together = seeds([1, 2, 3, 7], messages=neighbours)
    assert np.array_equal(together[3], alone[0])
    assert len({bytes(row) for row in together}) == 4


def test_row_seed_tells_apart_bytes_that_pad_alike() -> None:
    # zero padding and the length field: "a" and "a\0" fill one block the same way
    padded = seeds([0, 0, 0], messages=[b"a", b"a\x00", b"a" + b"\x00" * 15])
    assert len({bytes(row) for row in padded}) == 3
    # a digested row (> 512 bytes) never equals an inline one, and depends on every byte
    long_a, long_b = b"z" * 600, b"z" * 599 + b"y"
    digested = seeds([0, 0], messages=[long_a, long_b])
    assert not np.array_equal(digested[0], digested[1])


def test_more_words_continue_each_rows_stream() -> None:
    source = keyed([4, 5, 6])
    first = source.words(3, 7)
    rows = np.array([2, 0], dtype=np.int64)
    later = source.more_words(rows, 7, 4)
    longer = keyed([4, 5, 6]).words(3, 11)
    assert np.array_equal(first, longer[:, :7])
    assert np.array_equal(later, longer[rows, 7:11])
    # an odd start inside a block
    assert np.array_equal(source.more_words(rows, 3, 2), longer[rows, 3:5])


def test_keyed_prefix_is_stable_when_more_words_are_drawn() -> None:
    assert np.array_equal(keyed([3]).words(1, 3), keyed([3]).words(1, 5)[:, :3])


def test_keyed_stream_has_a_stated_limit() -> None:
    with pytest.raises(ValueError, match="2\\*\\*17"):
        keyed([3]).more_words(np.array([0], dtype=np.int64), 2**17 - 1, 2)


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
    with pytest.raises(ValueError, match="at least 32"):
        NoiseKeys(b"short", "raw")


def test_noise_domain_separates_deployments_that_share_a_topic_name() -> None:
    # red team: a re-created topic (or a second cluster) with the same name and key gave
    # the same bytes at the same coordinates the same noise: a writer placing a guess at a
    # victim's old offset learned whether the guess was the victim's exact record
    offsets = np.arange(4, dtype=np.int64)
    raw = [b'{"crashed": true}'] * 4
    keys_a, keys_b = NoiseKeys(SECRET, "raw"), NoiseKeys(SECRET, "raw", "recreated-2026-11")
    a = row_seeds(keys_a.row, offsets * 0, offsets, raw)
    b = row_seeds(keys_b.row, offsets * 0, offsets, raw)
    assert not np.any(np.all(a == b, axis=1))
    assert keys_a.field(b"r") == keys_b.field(b"r")  # the release itself is the same


def test_keys_are_separated_by_purpose_and_context() -> None:
    keys = NoiseKeys(SECRET, "raw")
    derived = {
        keys.row,
        keys.memo,
        keys.field(b"a"),
        keys.field(b"b"),
        NoiseKeys(SECRET, "raw2").row,
        derive_key(SECRET, "field"),
        derive_key(SECRET, "row", b"raw", b""),
    }
    assert keys.row == derive_key(SECRET, "row", b"raw", b"")
    assert len(derived) == 6  # the last one is keys.row itself
    assert "hidden" in repr(keys) and SECRET.hex() not in repr(keys)


def test_row_seed_is_the_documented_cbc_mac() -> None:
    # written from the docstring, one row at a time with a plain AES-CBC encryption
    # (CBC with a zero IV: the last ciphertext block is the CBC-MAC)
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    key = NoiseKeys(SECRET, "raw").row
    rows = [(0, 5, b""), (3, 2**40, b"a" * 16), (1, 7, b'{"x": 1.5}' * 9), (2, 9, b"q" * 513)]

    def mac(partition: int, offset: int, value: bytes) -> bytes:
        if len(value) > 512:
            import hashlib

            value, length = hashlib.blake2b(value, digest_size=32).digest(), 0xFFFFFFFF
        else:
            length = len(value)
        head = offset.to_bytes(8, "little", signed=True) + partition.to_bytes(4, "little")
        data = head + length.to_bytes(4, "little") + value + b"\x00" * (-len(value) % 16)
        encryptor = Cipher(algorithms.AES(key), modes.CBC(bytes(16))).encryptor()
        return (encryptor.update(data) + encryptor.finalize())[-16:]

    got = row_seeds(
        key,
        np.array([r[0] for r in rows], dtype=np.int64),
        np.array([r[1] for r in rows], dtype=np.int64),
        [r[2] for r in rows],
    )
    assert [bytes(row) for row in got] == [mac(*r) for r in rows]

"""File mode's fresh noise: AES-256-CTR keystreams under a new kernel-CSPRNG key per call.

The keystream is checked against AES-256 of the counter blocks computed here
block by block (ECB on the big-endian counters), so the counter-mode
construction itself is under test, not only its shape.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from privstream.pipeline import noise
from privstream.pipeline.noise import KernelSeededAes


def expected_words(key: bytes, count: int) -> list[int]:
    """``count`` little-endian words of AES-256(key, counter), counters 0, 1, ... (big-endian)."""
    blocks = b"".join(i.to_bytes(16, "big") for i in range(-(-count // 2)))
    encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()  # noqa: S305 -- the raw block cipher
    stream = encryptor.update(blocks) + encryptor.finalize()
    return np.frombuffer(stream, dtype="<u8")[:count].tolist()


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The keys the source draws, in order (deterministic: 32 bytes of a counter each)."""
    drawn: list[bytes] = []
    counter = itertools.count(1)

    def urandom(size: int) -> bytes:
        assert size == 32
        drawn.append(bytes([next(counter)]) * 32)
        return drawn[-1]

    monkeypatch.setattr(noise.os, "urandom", urandom)
    return drawn


def test_words_are_the_keystream_of_a_fresh_key_per_call(keys: list[bytes]) -> None:
    source = KernelSeededAes()
    first = source.words(3, 5)
    second = source.more_words(np.array([0, 2]), 5, 3)
    assert first.shape == (3, 5) and first.dtype == np.uint64
    assert second.shape == (2, 3)
    assert first.ravel().tolist() == expected_words(keys[0], 15)
    assert second.ravel().tolist() == expected_words(keys[1], 6)
    assert len(keys) == 2  # a new key for every call: no two calls share words


def test_large_requests_are_split_over_fresh_keys(
    keys: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(KernelSeededAes, "MAX_BLOCKS", 4)  # 8 words per key
    words = KernelSeededAes().words(3, 7).ravel().tolist()
    assert len(keys) == 3
    assert words == expected_words(keys[0], 8) + expected_words(keys[1], 8) + expected_words(
        keys[2], 5
    )


def test_empty_requests_draw_no_key(keys: list[bytes]) -> None:
    assert KernelSeededAes().words(0, 4).shape == (0, 4)
    assert KernelSeededAes().words(5, 0).shape == (5, 0)
    assert not keys


def test_bits_are_balanced(keys: list[bytes]) -> None:
    """Each of the 64 bit positions is set in half the words, within 6 standard deviations.

    Deterministic (fixed keys); for a random key the probability that some position
    strays that far is below 64 * 2e-9 = 1.3e-7.
    """
    words = KernelSeededAes().words(1 << 12, 1 << 8).ravel()
    ones = np.array([np.count_nonzero((words >> np.uint64(b)) & np.uint64(1)) for b in range(64)])
    n = words.size
    assert np.all(np.abs(ones - n / 2) < 6 * np.sqrt(n / 4))

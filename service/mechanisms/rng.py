"""Where the noise comes from: 64-bit words, a row of them per released value.

Every mechanism asks its source for ``words(n, k)``: an ``(n, k)`` array of
independent uniform 64-bit words, row ``i`` for value ``i`` of the column,
and it calls ``words`` exactly once per release. That contract lets a keyed
source make row ``i`` a pure function of that record's stream coordinates.

* ``OsEntropy`` (production default): the kernel CSPRNG (``os.urandom`` ->
  ``getrandom(2)``), one system call per column.
* ``KeyedSource`` (replay-stable mode): AES-256 used as a pseudo-random
  function over the block ``(offset, partition, field, counter)`` under a key
  derived from the secret and the topic by HMAC-SHA256. AES-ECB over distinct
  counter blocks is AES-CTR with a structured counter: indistinguishable from
  random for anyone without the key, and the same key and coordinates give
  the same words, bit for bit, however a replay splits the stream into
  batches.
* ``MemoSource`` (``memoize_by`` fields, RAPPOR's permanent randomized
  response): keyed BLAKE2b over ``(field scope, memo token, counter)``, so a
  row's words depend on what the row *says* (which device, which true
  value), not on where it sits in the stream.
* ``service.testing.SeededSource``: numpy PCG64, tests only.

Uniforms are built from words as ``((w >> 12) + 0.5) * 2**-52``: 52 random
bits, every value ``k + 0.5`` (``k < 2**52``) exact in a double, so the
result lies in ``[2**-53, 1 - 2**-53]``, strictly inside (0, 1), and
``log(u)`` and ``log(1 - u)`` are always finite. (With 53 bits the top
values round up to exactly 1.0.)
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Sequence
from typing import Protocol

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from numpy.typing import NDArray

_TWO_POW_MINUS_52 = 2.0**-52
Words = NDArray[np.uint64]


class NoiseSource(Protocol):
    """Independent uniform 64-bit words, ``k`` per row, for ``n`` rows."""

    def words(self, n: int, k: int) -> Words:
        """Return an ``(n, k)`` uint64 array. Call once per release of a column."""
        ...


def words_to_uniform(words: Words) -> NDArray[np.float64]:
    """Map 64-bit words to uniforms strictly inside (0, 1), 52 bits of resolution."""
    top52 = (words >> np.uint64(12)).astype(np.float64)
    return (top52 + 0.5) * _TWO_POW_MINUS_52


def uniforms(source: NoiseSource, n: int, k: int) -> NDArray[np.float64]:
    """``(n, k)`` uniforms on (0, 1) from one ``words`` call."""
    return words_to_uniform(source.words(n, k))


class OsEntropy:
    """Words from the kernel CSPRNG, read in bulk."""

    def words(self, n: int, k: int) -> Words:
        count = n * k
        raw = os.urandom(8 * count) if count else b""
        return np.frombuffer(raw, dtype=np.uint64).reshape(n, k)


_MIN_SECRET_BYTES = 32


def _check_secret(secret: bytes) -> None:
    if len(secret) < _MIN_SECRET_BYTES:
        raise ValueError("the noise key must hold at least 32 bytes (256 bits) of secret")


def derive_stream_key(secret: bytes, stream: str) -> bytes:
    """The AES-256 key for one input topic: HMAC-SHA256(secret, label || topic)."""
    _check_secret(secret)
    return hmac.new(secret, b"privstream/noise/v1\x00" + stream.encode(), hashlib.sha256).digest()


def derive_memo_key(secret: bytes) -> bytes:
    """The BLAKE2b key of memoized fields: HMAC-SHA256(secret, memo label).

    The label differs from ``derive_stream_key``'s (``privstream/noise/v1``
    followed by a topic), so the memo key is independent of every stream key.
    It does not depend on the topic: a device's memoized answers survive a
    topic migration (and the same answer twice is no second release).
    """
    _check_secret(secret)
    return hmac.new(secret, b"privstream/memo/v1\x00", hashlib.sha256).digest()


class KeyedSource:
    """Replay-stable words: AES-256(key(topic), offset | partition | field | counter).

    ``partitions`` and ``offsets`` give the stream coordinates of the rows this
    source will serve (one per value of the column), ``field`` the field's
    position in the config. Block layout, little-endian, 16 bytes:
    offset int64 | partition int32 | field uint16 | counter uint16, where
    ``counter`` numbers the 2-word blocks of a row. Each field may draw up to
    2**17 words per record.
    """

    def __init__(
        self,
        stream_key: bytes,
        partitions: NDArray[np.int64],
        offsets: NDArray[np.int64],
        field: int,
    ) -> None:
        if len(partitions) != len(offsets):
            raise ValueError("one partition per offset")
        self._cipher = Cipher(algorithms.AES(stream_key), modes.ECB())  # noqa: S305 -- PRF on unique blocks
        self._partitions = np.asarray(partitions, dtype=np.int64)
        self._offsets = np.asarray(offsets, dtype=np.int64)
        self._field = field

    def words(self, n: int, k: int) -> Words:
        if n != len(self._offsets):
            raise ValueError(f"keyed source bound to {len(self._offsets)} rows, asked for {n}")
        blocks_per_row = (k + 1) // 2
        block = np.zeros(
            (n, blocks_per_row),
            dtype=[("offset", "<i8"), ("partition", "<i4"), ("field", "<u2"), ("counter", "<u2")],
        )
        block["offset"] = self._offsets[:, None]
        block["partition"] = self._partitions[:, None]
        block["field"] = self._field
        block["counter"] = np.arange(blocks_per_row, dtype=np.uint16)[None, :]
        encryptor = self._cipher.encryptor()
        out = encryptor.update(block.tobytes()) + encryptor.finalize()
        return (
            np.frombuffer(out, dtype="<u8").astype(np.uint64).reshape(n, 2 * blocks_per_row)[:, :k]
        )


def _length_prefixed(part: bytes) -> bytes:
    return len(part).to_bytes(8, "little") + part


class MemoSource:
    """Words that are a pure function of (memo key, field scope, row token).

    PRF: BLAKE2b in keyed mode (RFC 7693: a MAC, hence a PRF under the key),
    key = ``derive_memo_key(secret)``, 64-byte digests, personalisation
    ``privstream-memo1``. Message for row ``i``, block ``c``::

        len(scope) || scope || len(token_i) || token_i || c

    lengths are 8-byte and ``c`` a 4-byte little-endian integer; a block
    gives 8 words, so ``k <= 8`` (randomized response draws 2, local hashing
    3) costs one hash per row. ``scope`` names the released field and its
    release parameters, ``token_i`` encodes (memo value, true value) of row
    ``i`` (both canonical, built by the pipeline): the same device reporting
    the same value gets the same words in every batch, partition and offset,
    which is what memoization means, while any other (field, parameters,
    device, value) gets independent ones.
    """

    _PERSON = b"privstream-memo1"  # BLAKE2b personalisation: 16 bytes
    _WORDS_PER_BLOCK = 8

    def __init__(self, memo_key: bytes, scope: bytes, tokens: Sequence[bytes]) -> None:
        if not _MIN_SECRET_BYTES <= len(memo_key) <= hashlib.blake2b.MAX_KEY_SIZE:
            raise ValueError("the memo key must hold 32 to 64 bytes (use derive_memo_key)")
        self._prefix = hashlib.blake2b(
            _length_prefixed(scope), key=memo_key, digest_size=64, person=self._PERSON
        )
        self._tokens = list(tokens)

    def words(self, n: int, k: int) -> Words:
        if n != len(self._tokens):
            raise ValueError(f"memo source bound to {len(self._tokens)} rows, asked for {n}")
        blocks = -(-k // self._WORDS_PER_BLOCK)
        out = bytearray()
        for token in self._tokens:
            row = self._prefix.copy()
            row.update(_length_prefixed(token))
            for counter in range(blocks):
                block = row.copy()
                block.update(counter.to_bytes(4, "little"))
                out += block.digest()
        width = blocks * self._WORDS_PER_BLOCK
        array = np.frombuffer(bytes(out), dtype="<u8").astype(np.uint64)
        return array.reshape(n, width)[:, :k]

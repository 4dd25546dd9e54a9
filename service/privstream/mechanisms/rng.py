"""Where the noise comes from: a stream of 64-bit words per released value.

Contract: every mechanism asks its source for ``words(n, k)`` (row ``i`` the
first ``k`` words of value ``i``'s stream) once per release, and
``more_words(rows, start, k)`` only past every word it has already read, so a
keyed source can make row ``i``'s stream a pure function of what that row
releases. Uniforms are ``((w >> 12) + 0.5) * 2**-52``, strictly inside (0, 1);
samplers whose guarantee depends on exact probabilities compare whole words
with integer thresholds instead.

Sources (claim: computationally independent uniform words, cryptographic only):

* ``OsEntropy`` (file mode default): the kernel CSPRNG, fresh every call.
* ``KeyedSource`` (the worker, replay-stable): AES-256 over ``row seed XOR
  counter`` under a key per field release (``NoiseKeys.field`` of the release
  id); the row seed (``row_seeds``) is a CBC-MAC PRF of the record's
  coordinates and raw bytes: same bytes, coordinates and release give the
  same words bit for bit; anything else independent words.
* ``MemoSource`` (memoized fields): keyed BLAKE2b over ``(field scope, memo
  token, counter)``; ``SplicedSource`` joins two sources.
* ``privstream.testing.SeededSource``: numpy PCG64, tests only.

Keys (version 2): HKDF-SHA256 of the noise secret, one purpose per key, with
the topic and ``kafka.noise_domain`` in the row and memo contexts.

Proof, step by step, with the function each step proves:
docs/proofs/noise-sources.md.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from numpy.typing import NDArray

from privstream.errors import MechanismError, NoiseError

_TWO_POW_MINUS_52 = 2.0**-52
Words = NDArray[np.uint64]


class NoiseSource(Protocol):
    """Independent uniform 64-bit words: a stream per row, read from its start."""

    def words(self, n: int, k: int) -> Words:
        """The first ``k`` words of ``n`` rows, ``(n, k)`` uint64. Call once per release."""
        ...

    def more_words(self, rows: NDArray[np.int64], start: int, k: int) -> Words:
        """Words ``start .. start + k - 1`` of the streams of ``rows`` (positions in ``0..n-1``).

        ``start`` must be at or past every word already read from those rows.
        """
        ...


def words_to_uniform(words: Words) -> NDArray[np.float64]:
    """Map 64-bit words to uniforms strictly inside (0, 1), 52 bits of resolution."""
    top52 = (words >> np.uint64(12)).astype(np.float64)
    return (top52 + 0.5) * _TWO_POW_MINUS_52


def uniforms(source: NoiseSource, n: int, k: int) -> NDArray[np.float64]:
    """``(n, k)`` uniforms on (0, 1) from one ``words`` call."""
    return words_to_uniform(source.words(n, k))


class OsEntropy:
    """Words from the kernel CSPRNG, read in bulk; every call is fresh."""

    def words(self, n: int, k: int) -> Words:
        count = n * k
        raw = os.urandom(8 * count) if count else b""
        return np.frombuffer(raw, dtype=np.uint64).reshape(n, k)

    def more_words(self, rows: NDArray[np.int64], start: int, k: int) -> Words:
        return self.words(len(rows), k)


_MIN_SECRET_BYTES = 32
_KDF_SALT = b"privstream"
_KDF_LABEL = b"privstream/v2/"


def _check_secret(secret: bytes) -> None:
    if len(secret) < _MIN_SECRET_BYTES:
        raise MechanismError(
            f"the noise key holds {len(secret)} bytes; it needs at least 32 bytes (256 bits): "
            "make one with 'privstream keygen'"
        )


def _length_prefixed(part: bytes) -> bytes:
    return len(part).to_bytes(8, "little") + part


def derive_key(secret: bytes, purpose: str, *context: bytes) -> bytes:
    """A 32-byte key for one purpose: HKDF-SHA256(secret, info = label, purpose, context)."""
    _check_secret(secret)
    info = _KDF_LABEL + purpose.encode() + b"".join(map(_length_prefixed, context))
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=_KDF_SALT, info=info).derive(secret)


def derive_memo_key(secret: bytes, *context: bytes) -> bytes:
    """The BLAKE2b key of memoized fields within one trust domain (``context``).

    The worker passes its input topic and noise domain: a device's memoized
    answers on one topic cannot be queried through another topic that shares
    the secret (a staging topic, another collector whose message keys are not
    authenticated). The price: a topic migration starts a new memory, one more
    release of each (device, value) pair.
    """
    return derive_key(secret, "memo", *context)


class NoiseKeys:
    """The keys a worker over one input topic derives from its noise secret.

    Holds derived keys only (never the secret); ``repr`` shows none of them.
    """

    def __init__(self, secret: bytes, topic: str, domain: str = "") -> None:
        self.topic = topic
        self.domain = domain
        context = (topic.encode(), domain.encode())
        self.row = derive_key(secret, "row", *context)
        self.memo = derive_memo_key(secret, *context)
        self._field_root = derive_key(secret, "field")
        self._fields: dict[bytes, bytes] = {}

    def field(self, release_id: bytes) -> bytes:
        """The AES-256 key of one field release: HMAC-SHA256(field root, release id)."""
        key = self._fields.get(release_id)
        if key is None:
            key = hmac.new(self._field_root, release_id, hashlib.sha256).digest()
            self._fields[release_id] = key
        return key

    def __repr__(self) -> str:
        return f"NoiseKeys(topic={self.topic!r}, domain={self.domain!r}, keys=<derived, hidden>)"


#: rows longer than this are MACed through their BLAKE2b-256 digest (one hash call)
_INLINE_BYTES = 512
#: length field of a digested row: no inline row is this long
_DIGESTED = 0xFFFFFFFF
_BLOCK = 16


def _ecb(key: bytes) -> Cipher[modes.ECB]:
    return Cipher(algorithms.AES(key), modes.ECB())  # noqa: S305 -- PRF on unique blocks


def _aes_rows(key: bytes, blocks: NDArray[Any]) -> NDArray[np.uint64]:
    """AES-256 of every 16-byte block of ``blocks``; one row of 2 little-endian words each."""
    encryptor = _ecb(key).encryptor()
    out = encryptor.update(blocks.tobytes()) + encryptor.finalize()
    return np.frombuffer(out, dtype="<u8").reshape(-1, 2)


def row_seeds(
    row_key: bytes,
    partitions: NDArray[np.int64],
    offsets: NDArray[np.int64],
    messages: Sequence[bytes],
    lengths: NDArray[np.int64] | None = None,
) -> NDArray[np.uint8]:
    """One 16-byte seed per record: a PRF of (partition, offset, raw bytes) under ``row_key``.

    ``lengths``: ``len(messages[i])`` when the caller has them already.

    CBC-MAC with AES-256 over the prefix-free encoding::

        block 0:  offset int64 | partition int32 | length uint32   (little-endian)
        block 1+: the raw bytes, zero-padded to whole blocks

    The length in the first block makes the set of encodings prefix-free, for
    which CBC-MAC is a PRF (Bellare, Kilian, Rogaway 2000; Petrank, Rackoff
    2000). Rows longer than 512 bytes are encoded as their BLAKE2b-256 digest
    with the length field ``0xFFFFFFFF``, which no inline row has. The MAC
    runs column by column over the batch, one AES call per 16 bytes of the
    longest inline row (at most 32), so the cost is a few vector passes, not
    a hash call per record. The seed depends on nothing else: not the batch, not the
    other rows.
    """
    n = len(messages)
    if lengths is None:
        lengths = np.fromiter(map(len, messages), dtype=np.int64, count=n)
    digested = lengths > _INLINE_BYTES
    payloads: Sequence[bytes] = messages
    if digested.any():
        payloads = [
            m if len(m) <= _INLINE_BYTES else hashlib.blake2b(m, digest_size=32).digest()
            for m in messages
        ]
    header = np.zeros(n, dtype=[("offset", "<i8"), ("partition", "<i4"), ("length", "<u4")])
    header["offset"] = offsets
    header["partition"] = partitions
    header["length"] = np.where(digested, _DIGESTED, lengths)
    state = header_mac = _aes_rows(row_key, header)
    nblocks = -(-np.where(digested, 32, lengths) // _BLOCK)
    width = int(nblocks.max(initial=0))
    if not width:
        return state.view(np.uint8).reshape(n, _BLOCK)
    # the rows back to back; row i's block c is the 16 bytes at start_i + 16 c, and in its
    # last, partial block the bytes past the row's end (the next row's) are zeroed. One
    # gather for the whole batch: no per-row Python work beyond the join.
    size = width * _BLOCK
    joined = b"".join([*payloads, bytes(size)])
    sizes = np.where(digested, 32, lengths)
    starts = np.cumsum(sizes) - sizes
    # each row's window of `size` bytes as one opaque item: the gather is a memcpy per row
    windows = np.ndarray((len(joined) - size + 1,), dtype=f"V{size}", buffer=joined, strides=(1,))
    body = windows[starts].view(np.uint8).reshape(n, width, _BLOCK)
    partial = np.flatnonzero(sizes % _BLOCK)
    tail = sizes[partial]
    keep = np.arange(_BLOCK) < (tail % _BLOCK)[:, None]
    body[partial, tail // _BLOCK] *= keep.astype(np.uint8)
    # column-major, 16-byte items: column c is one contiguous (n, 2) array of words
    columns = np.ascontiguousarray(body.view("V16").reshape(n, width).T).view("<u8")
    columns = columns.reshape(width, n, 2)
    # a row's MAC is its state after its own last block (shorter rows run on, unused)
    macs = header_mac.copy()
    order = np.argsort(nblocks, kind="stable")
    ends = np.searchsorted(nblocks[order], np.arange(width + 1), side="right")
    for c in range(width):
        state = _aes_rows(row_key, state ^ columns[c])
        finishing = order[ends[c] : ends[c + 1]]  # rows of c + 1 blocks
        macs[finishing] = state[finishing]
    return macs.view(np.uint8).reshape(n, _BLOCK)


_COUNTER_LIMIT = 2**16


class KeyedSource:
    """Replay-stable words: AES-256(field key, row seed XOR counter).

    ``field_key`` is ``NoiseKeys.field(release_id)``, ``seeds`` the
    ``row_seeds`` of the rows this source serves, in column order. Block
    ``c`` of a row is its seed with the counter ``c`` (uint16) XORed into the
    seed's last two bytes; it gives the row's words ``2c`` and ``2c + 1``: up
    to 2**17 words per row and field. Within a row the blocks are distinct;
    two rows share a block only if their seeds agree in the first 112 bits
    (probability 2**-112 per pair).
    """

    def __init__(self, field_key: bytes, seeds: NDArray[np.uint8]) -> None:
        self._key = field_key
        self._seeds = np.ascontiguousarray(seeds).view("<u8").reshape(-1, 2)

    def words(self, n: int, k: int) -> Words:
        if n != len(self._seeds):
            raise NoiseError(f"keyed source bound to {len(self._seeds)} rows, asked for {n}")
        return self._stream(self._seeds, 0, k)

    def more_words(self, rows: NDArray[np.int64], start: int, k: int) -> Words:
        return self._stream(self._seeds[rows], start, k)

    def _stream(self, seeds: NDArray[np.uint64], start: int, k: int) -> Words:
        first, last = start // 2, (start + k + 1) // 2  # blocks [first, last)
        if last > _COUNTER_LIMIT:
            raise MechanismError(f"a field asked for word {start + k} of a row; the limit is 2**17")
        counters = np.arange(first, last, dtype="<u8") << np.uint64(48)  # bytes 14-15
        blocks = np.empty((len(seeds), last - first, 2), dtype="<u8")
        blocks[:, :, 0] = seeds[:, None, 0]
        blocks[:, :, 1] = seeds[:, None, 1] ^ counters[None, :]
        words = _aes_rows(self._key, blocks).astype(np.uint64).reshape(len(seeds), -1)
        skip = start - 2 * first
        return words[:, skip : skip + k]


class MemoSource:
    """Words that are a pure function of (memo key, field scope, row token).

    PRF: BLAKE2b in keyed mode (RFC 7693: a MAC, hence a PRF under the key),
    key = ``derive_memo_key(secret)``, 64-byte digests, personalisation
    ``privstream-memo1``. Message for row ``i``, block ``c``::

        len(scope) || scope || len(token_i) || token_i || c

    lengths are 8-byte and ``c`` a 4-byte little-endian integer; a block
    gives 8 words, so ``k <= 8`` (randomized response draws 2, local hashing
    3) costs one hash per row. ``scope`` names the released field, its
    identity source and release parameters, ``token_i`` encodes (device
    identity, true value) of row ``i``, or the identity alone (built by
    ``privstream.pipeline.plan.MemoPlan``): the same device reporting the same
    value gets the same words in every batch, partition and offset, which is
    what memoization means, while any other (field, parameters, device,
    value) gets independent ones.

    The words are a fixed function of the token, so whoever can make a row
    with a victim's identity can query the victim's answers: the identity
    must come from something writers cannot forge (the Kafka message key set
    by an authenticated collector, docs/protection.md, "Repeated reports").
    """

    _PERSON = b"privstream-memo1"  # BLAKE2b personalisation: 16 bytes
    _WORDS_PER_BLOCK = 8

    def __init__(self, memo_key: bytes, scope: bytes, tokens: Sequence[bytes]) -> None:
        if not _MIN_SECRET_BYTES <= len(memo_key) <= hashlib.blake2b.MAX_KEY_SIZE:
            raise NoiseError("the memo key must hold 32 to 64 bytes (use derive_memo_key)")
        self._prefix = hashlib.blake2b(
            _length_prefixed(scope), key=memo_key, digest_size=64, person=self._PERSON
        )
        self._tokens = list(tokens)

    def words(self, n: int, k: int) -> Words:
        if n != len(self._tokens):
            raise NoiseError(f"memo source bound to {len(self._tokens)} rows, asked for {n}")
        return self._stream(self._tokens, 0, k)

    def more_words(self, rows: NDArray[np.int64], start: int, k: int) -> Words:
        return self._stream([self._tokens[int(i)] for i in rows], start, k)

    def _stream(self, tokens: Sequence[bytes], start: int, k: int) -> Words:
        per = self._WORDS_PER_BLOCK
        first, last = start // per, -(-(start + k) // per)
        out = bytearray()
        for token in tokens:
            row = self._prefix.copy()
            row.update(_length_prefixed(token))
            for counter in range(first, last):
                block = row.copy()
                block.update(counter.to_bytes(4, "little"))
                out += block.digest()
        width = (last - first) * per
        array = np.frombuffer(bytes(out), dtype="<u8").astype(np.uint64).reshape(len(tokens), width)
        skip = start - first * per
        return array[:, skip : skip + k]


class SplicedSource:
    """Words ``0 .. head_words - 1`` of each row from ``head``, the others from ``tail``.

    Both sources serve the same rows; a row's word ``j`` is word ``j`` of the
    stream it comes from, so the two streams never share a word.
    """

    def __init__(self, head: NoiseSource, head_words: int, tail: NoiseSource) -> None:
        self._head = head
        self._split = head_words
        self._tail = tail

    def words(self, n: int, k: int) -> Words:
        h = self._split
        if k <= h:
            return self._head.words(n, k)
        return np.concatenate([self._head.words(n, h), self._tail.words(n, k)[:, h:]], axis=1)

    def more_words(self, rows: NDArray[np.int64], start: int, k: int) -> Words:
        h, end = self._split, start + k
        parts: list[Words] = []
        if start < h:
            parts.append(self._head.more_words(rows, start, min(end, h) - start))
        if end > h:
            first = max(start, h)
            parts.append(self._tail.more_words(rows, first, end - first))
        return np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]

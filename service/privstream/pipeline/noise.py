"""Which noise source each column of a batch draws from.

``Fresh`` hands every column the same non-replayable source (in file mode
``KernelSeededAes``: AES-256-CTR keystreams under fresh kernel-CSPRNG keys).
``Replayable`` (the worker) gives each column a ``KeyedSource`` under its
field release's own key, fed with one seed per row that is a PRF of the
record's topic, partition, offset and raw bytes (``privstream.mechanisms.rng``).
A record's noise is thus a pure function of (secret, topic, partition,
offset, raw bytes, field release) however the
stream is cut into batches:

* a replay (same bytes, same coordinates, same config) releases the same
  bytes, so an aborted or duplicated copy is no second draw;
* a different record at reused coordinates (a re-created topic, a mirror
  with the same name), or the same record under a changed release (other
  epsilon, bounds, mechanism, ...), gets independent noise: a second release
  whose epsilons add, never one whose noise cancels;
* fields are told apart by their release id (name and parameters), not by
  their position: reordering fields changes nothing, and no two fields of
  a config share words (``x + Z`` and ``y + Z`` would give away ``x - y``).

Memoized fields (``memo_identity`` / ``memoize_by``) ask ``for_memo``
instead: their words are a function of what each row says (device
identity, true value) rather than of where it
sits in the stream, so a device that reports the same value again gets the
same answer (``privstream.mechanisms.rng.MemoSource``). ``Replayable`` always
has the memo key; ``Fresh`` without one draws fresh noise (every report is
then a new release; the CLI warns).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from numpy.typing import NDArray

from privstream.errors import NoiseError
from privstream.mechanisms.rng import (
    KeyedSource,
    MemoSource,
    NoiseKeys,
    NoiseSource,
    Words,
    row_seeds,
)


@runtime_checkable
class NoiseProvider(Protocol):
    def for_column(self, release_id: bytes, rows: NDArray[np.int64]) -> NoiseSource:
        """The source for the field release ``release_id`` over the batch rows ``rows``."""
        ...

    def for_memo(self, scope: bytes, tokens: Sequence[bytes]) -> NoiseSource:
        """The source for a memoized field: row ``i``'s words are a function of ``tokens[i]``.

        ``scope`` names the field and its release parameters (built by the plan),
        ``tokens`` encode each row's (device identity, true value) (built by the batch).
        """
        ...


class Fresh:
    """Independent fresh noise for every column (memoized ones too, unless given a memo key)."""

    def __init__(self, source: NoiseSource, *, memo_key: bytes | None = None) -> None:
        self._source = source
        self._memo_key = memo_key

    def for_column(self, release_id: bytes, rows: NDArray[np.int64]) -> NoiseSource:
        return self._source

    def for_memo(self, scope: bytes, tokens: Sequence[bytes]) -> NoiseSource:
        if self._memo_key is None:
            return self._source
        return MemoSource(self._memo_key, scope, tokens)


class KernelSeededAes:
    """Fresh words for file mode: AES-256-CTR under a new key from the kernel CSPRNG per call.

    ``OsEntropy`` reads every word from ``os.urandom``, which runs at a few
    hundred MB/s on some kernels (measured 220 MB/s in a Firecracker VM: 9 us
    of a 128-d vector record's 2 KiB of noise words). Here each ``words`` or
    ``more_words`` call draws a 32-byte key from ``os.urandom`` and expands it
    with AES-256 in counter mode (the CTR_DRBG construction of NIST SP 800-90A
    without state: nothing is kept between calls, so no two calls share a key
    and no released value depends on another call's words), at several GB/s.

    Security: a call yields ``q`` blocks of the keystream of a uniformly random
    key; distinguishing them from uniform words is at most the PRP/PRF switching
    advantage ``q^2 / 2^129`` plus AES-256's own distinguishing advantage.
    Calls are capped at ``MAX_BLOCKS`` = ``2^24`` blocks (256 MiB, far above a
    1 MiB file block's needs; larger requests are split over fresh keys), which
    bounds the switching term at ``2^-81``. The worker's keyed noise
    (``KeyedSource``) already rests on AES-256 the same way; DP's guarantees then
    hold against any computationally bounded observer.
    """

    #: keystream blocks per key at most (switching bound above)
    MAX_BLOCKS = 2**24

    def words(self, n: int, k: int) -> Words:
        count = n * k
        if not count:
            return np.zeros((n, k), dtype=np.uint64)
        chunk = 2 * self.MAX_BLOCKS  # words per key
        parts = [self._keystream(min(chunk, count - at)) for at in range(0, count, chunk)]
        raw = parts[0] if len(parts) == 1 else b"".join(parts)
        return np.frombuffer(raw, dtype=np.uint64).reshape(n, k)

    def more_words(self, rows: NDArray[np.int64], start: int, k: int) -> Words:
        return self.words(len(rows), k)

    @staticmethod
    def _keystream(words: int) -> bytes:
        encryptor = Cipher(algorithms.AES(os.urandom(32)), modes.CTR(bytes(16))).encryptor()
        return encryptor.update(bytes(8 * words))


class Replayable:
    """Keyed noise bound to each batch message's coordinates and raw bytes.

    ``messages[i]`` is the raw value at ``(partitions[i], offsets[i])`` of
    ``keys.topic``, exactly as consumed (the bytes ``process_batch`` is given).
    Row seeds are computed once, on the first column that needs them.
    """

    def __init__(
        self,
        keys: NoiseKeys,
        partitions: NDArray[np.int64],
        offsets: NDArray[np.int64],
        messages: Sequence[bytes],
    ) -> None:
        if not len(partitions) == len(offsets) == len(messages):
            raise NoiseError("one partition and one offset per message")
        self._keys = keys
        self._partitions = np.asarray(partitions, dtype=np.int64)
        self._offsets = np.asarray(offsets, dtype=np.int64)
        self._messages = messages
        self._seeds: NDArray[np.uint8] | None = None
        self._lengths: NDArray[np.int64] | None = None

    def lengths(self) -> NDArray[np.int64]:
        """Each message's length in bytes, computed once (the seeds and the decoder read them)."""
        if self._lengths is None:
            count = len(self._messages)
            self._lengths = np.fromiter(map(len, self._messages), dtype=np.int64, count=count)
        return self._lengths

    def longest(self, messages: Sequence[bytes]) -> int | None:
        """The longest message's length when ``messages`` are the very ones served (else None)."""
        if messages is not self._messages:
            return None
        return int(self.lengths().max(initial=0))

    def seeds(self) -> NDArray[np.uint8]:
        """The 16-byte row seed of every message (``row_seeds``), computed once."""
        if self._seeds is None:
            self._seeds = row_seeds(
                self._keys.row, self._partitions, self._offsets, self._messages, self.lengths()
            )
        return self._seeds

    def for_column(self, release_id: bytes, rows: NDArray[np.int64]) -> NoiseSource:
        seeds = self.seeds()
        # rows are distinct input positions in order: as many as messages means all of them
        mine = seeds if len(rows) == len(seeds) else seeds[rows]
        return KeyedSource(self._keys.field(release_id), mine)

    def for_memo(self, scope: bytes, tokens: Sequence[bytes]) -> NoiseSource:
        return MemoSource(self._keys.memo, scope, tokens)

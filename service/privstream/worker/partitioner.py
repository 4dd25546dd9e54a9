"""Kafka's default partitioner (murmur2 of the key), over a whole batch of keys at once.

``partition = (murmur2(key) & 0x7fffffff) % partitions``, as the Java client
and aiokafka place a keyed record (``org.apache.kafka.common.utils.Utils.murmur2``).
aiokafka's own ``murmur2`` is pure Python, about 5 us a key; here keys of
one length are hashed together in uint32 numpy arithmetic (wrapping like
Java's ``int``), one pass per 4-byte word.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

_SEED = np.uint32(0x9747B28C)
_M = np.uint32(0x5BD1E995)
_R = np.uint32(24)


def murmur2(keys: Sequence[bytes]) -> npt.NDArray[np.uint32]:
    """Java's ``Utils.murmur2`` of each key (as unsigned 32-bit)."""
    out = np.empty(len(keys), dtype=np.uint32)
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        by_length[len(key)].append(i)
    for length, rows in by_length.items():
        data = np.frombuffer(b"".join(keys[i] for i in rows), dtype=np.uint8)
        out[rows] = _of_length(data.reshape(len(rows), length), length)
    return out


def _of_length(data: npt.NDArray[np.uint8], length: int) -> npt.NDArray[np.uint32]:
    h = np.full(len(data), _SEED ^ np.uint32(length), dtype=np.uint32)
    whole = length // 4
    if whole:
        words = np.ascontiguousarray(data[:, : 4 * whole]).view("<u4").astype(np.uint32)
        for j in range(whole):
            k = words[:, j] * _M
            k ^= k >> _R
            k *= _M
            h *= _M
            h ^= k
    tail, base = length % 4, 4 * whole
    if tail >= 3:
        h ^= data[:, base + 2].astype(np.uint32) << np.uint32(16)
    if tail >= 2:
        h ^= data[:, base + 1].astype(np.uint32) << np.uint32(8)
    if tail >= 1:
        h ^= data[:, base].astype(np.uint32)
        h *= _M
    h ^= h >> np.uint32(13)
    h *= _M
    h ^= h >> np.uint32(15)
    return h


def partitions_of(keys: Sequence[bytes], count: int) -> npt.NDArray[np.int64]:
    """The partition Kafka's default partitioner gives each key, of ``count``."""
    return (murmur2(keys) & np.uint32(0x7FFFFFFF)).astype(np.int64) % count

"""Kafka's default partitioner (murmur2 of the key), over a whole batch of keys at once.

``partition = (murmur2(key) & 0x7fffffff) % partitions``, as the Java client
and aiokafka place a keyed record (``org.apache.kafka.common.utils.Utils.murmur2``).
aiokafka's own ``murmur2`` is pure Python, about 5 us a key; here keys of
one length are hashed together in uint32 numpy arithmetic (wrapping like
Java's ``int``), one pass per 4-byte word.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

_SEED = np.uint32(0x9747B28C)
_M = np.uint32(0x5BD1E995)
_R = np.uint32(24)


def murmur2(keys: Sequence[bytes]) -> npt.NDArray[np.uint32]:
    """Java's ``Utils.murmur2`` of each key (as unsigned 32-bit).

    Keys are ordered by length (stable) and joined once; each run of one
    length is then a 2-d byte array hashed column by column.
    """
    out = np.empty(len(keys), dtype=np.uint32)
    if not keys:
        return out
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    if lengths[0] == lengths.min() == lengths.max():  # usual: ids of one format
        order = np.arange(len(keys))
        joined = b"".join(keys)
    else:
        order = np.argsort(lengths, kind="stable")
        joined = b"".join(map(keys.__getitem__, order.tolist()))
    ordered = lengths[order]
    data = np.frombuffer(joined, dtype=np.uint8)
    heads = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[heads[1:], len(keys)]
    offset = 0
    for head, end in zip(heads.tolist(), ends.tolist(), strict=True):
        length, rows = int(ordered[head]), end - head
        block = data[offset : offset + rows * length].reshape(rows, length)
        out[order[head:end]] = _of_length(block, length)
        offset += rows * length
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

"""Kafka's default partitioner (murmur2 of the key), over a whole batch of keys at once.

``partition = (murmur2(key) & 0x7fffffff) % partitions``, as the Java client
and aiokafka place a keyed record (``org.apache.kafka.common.utils.Utils.murmur2``).
aiokafka's own ``murmur2`` is pure Python, about 5 us a key; the batch is
hashed here in one C loop over the key objects (``_murmur2.c``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from privstream.worker import _murmur2


def murmur2(keys: Sequence[bytes]) -> npt.NDArray[np.uint32]:
    """Java's ``Utils.murmur2`` of each key (as unsigned 32-bit)."""
    out = np.empty(len(keys), dtype=np.uint32)
    _murmur2.murmur2(keys if isinstance(keys, list) else list(keys), out)
    return out


def partitions_of(keys: Sequence[bytes], count: int) -> npt.NDArray[np.int64]:
    """The partition Kafka's default partitioner gives each key, of ``count``."""
    return (murmur2(keys) & np.uint32(0x7FFFFFFF)).astype(np.int64) % count

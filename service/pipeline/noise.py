"""Which noise source each column of a batch draws from.

``Fresh`` hands every column the same non-replayable source (the OS CSPRNG
in production). ``Replayable`` binds a ``KeyedSource`` to the stream
coordinates of the column's rows and the field's position in the config, so
a record's noise is a pure function of (secret, topic, partition, offset,
field) however the stream is cut into batches. Fields are told apart by
their position, which is unique within a config: two fields sharing noise
words would release ``x + Z`` and ``y + Z`` and give away ``x - y``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from service.mechanisms.rng import KeyedSource, NoiseSource


@runtime_checkable
class NoiseProvider(Protocol):
    def for_column(self, field: int, rows: NDArray[np.int64]) -> NoiseSource:
        """The source for field ``field`` over the batch rows ``rows`` (in column order)."""
        ...


class Fresh:
    """Independent fresh noise for every column."""

    def __init__(self, source: NoiseSource) -> None:
        self._source = source

    def for_column(self, field: int, rows: NDArray[np.int64]) -> NoiseSource:
        return self._source


class Replayable:
    """Keyed noise bound to each row's (partition, offset) in one input topic."""

    def __init__(
        self, stream_key: bytes, partitions: NDArray[np.int64], offsets: NDArray[np.int64]
    ) -> None:
        self._key = stream_key
        self._partitions = np.asarray(partitions, dtype=np.int64)
        self._offsets = np.asarray(offsets, dtype=np.int64)

    def for_column(self, field: int, rows: NDArray[np.int64]) -> NoiseSource:
        return KeyedSource(self._key, self._partitions[rows], self._offsets[rows], field)

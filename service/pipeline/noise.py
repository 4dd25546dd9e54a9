"""Which noise source each column of a batch draws from.

``Fresh`` hands every column the same non-replayable source (the OS CSPRNG
in production). ``Replayable`` binds a ``KeyedSource`` to the stream
coordinates of the column's rows and the field's position in the config, so
a record's noise is a pure function of (secret, topic, partition, offset,
field) however the stream is cut into batches. Fields are told apart by
their position, which is unique within a config: two fields sharing noise
words would release ``x + Z`` and ``y + Z`` and give away ``x - y``.

Memoized fields (``memoize_by``) ask ``for_memo`` instead: their words are a
function of what each row says (device, true value) rather than of where it
sits in the stream, so a device that reports the same value again gets the
same answer (``service.mechanisms.rng.MemoSource``). That needs the memo key:
``Replayable`` refuses without one; ``Fresh`` without one draws fresh noise
(every report is then a new release; the CLI warns).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from service.mechanisms.rng import KeyedSource, MemoSource, NoiseSource


@runtime_checkable
class NoiseProvider(Protocol):
    def for_column(self, field: int, rows: NDArray[np.int64]) -> NoiseSource:
        """The source for field ``field`` over the batch rows ``rows`` (in column order)."""
        ...

    def for_memo(self, scope: bytes, tokens: Sequence[bytes]) -> NoiseSource:
        """The source for a memoized field: row ``i``'s words are a function of ``tokens[i]``.

        ``scope`` names the field and its release parameters (built by the plan),
        ``tokens`` encode each row's (memo value, true value) (built by the batch).
        """
        ...


class Fresh:
    """Independent fresh noise for every column (memoized ones too, unless given a memo key)."""

    def __init__(self, source: NoiseSource, *, memo_key: bytes | None = None) -> None:
        self._source = source
        self._memo_key = memo_key

    def for_column(self, field: int, rows: NDArray[np.int64]) -> NoiseSource:
        return self._source

    def for_memo(self, scope: bytes, tokens: Sequence[bytes]) -> NoiseSource:
        if self._memo_key is None:
            return self._source
        return MemoSource(self._memo_key, scope, tokens)


class Replayable:
    """Keyed noise bound to each row's (partition, offset) in one input topic.

    ``memo_key`` (``derive_memo_key(secret)``) serves memoized fields; a plan
    with a memoized field and no memo key is refused (ValueError) rather than
    silently released with per-offset noise.
    """

    def __init__(
        self,
        stream_key: bytes,
        partitions: NDArray[np.int64],
        offsets: NDArray[np.int64],
        *,
        memo_key: bytes | None = None,
    ) -> None:
        self._key = stream_key
        self._partitions = np.asarray(partitions, dtype=np.int64)
        self._offsets = np.asarray(offsets, dtype=np.int64)
        self._memo_key = memo_key

    def for_column(self, field: int, rows: NDArray[np.int64]) -> NoiseSource:
        return KeyedSource(self._key, self._partitions[rows], self._offsets[rows], field)

    def for_memo(self, scope: bytes, tokens: Sequence[bytes]) -> NoiseSource:
        if self._memo_key is None:
            raise ValueError(
                "a field has memoize_by but the noise provider has no memo key; "
                "pass memo_key=derive_memo_key(secret) to Replayable"
            )
        return MemoSource(self._memo_key, scope, tokens)

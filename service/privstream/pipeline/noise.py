"""Which noise source each column of a batch draws from.

``Fresh`` hands every column the same non-replayable source (the OS CSPRNG
in file mode). ``Replayable`` (the worker) gives each column a
``KeyedSource`` under its field release's own key, fed with one seed per row
that is a PRF of the record's topic, partition, offset and raw bytes
(``privstream.mechanisms.rng``). A record's noise is thus a pure function of
(secret, topic, partition, offset, raw bytes, field release) however the
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

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from privstream.errors import NoiseError
from privstream.mechanisms.rng import KeyedSource, MemoSource, NoiseKeys, NoiseSource, row_seeds


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

"""What subjects spent in one window (or over their lifetime): int64 rows behind a hash table.

A ``Spending`` holds, per subject it charged, one row of ``width`` int64s
(a window: epsilon and delta units; the lifetime: epsilon units) and the
subject's bytes (for the changelog's tombstones and for ``snapshot``). It is
keyed by the subject's ``hash()`` in a C hash table (``_slots.c``), which
finds a whole batch's rows in one loop, instead of one dict probe per subject
from the interpreter.

Keying by a 64-bit hash, not by the bytes, is conservative: two subjects
whose hashes collide are one subject to the ledger, so each is charged for
both and suppressed sooner, never later. A subject's own spending is always
at most what its row holds, so no cap is ever exceeded. ``hash()`` of bytes
is SipHash-1-3 under a key drawn per process (unless ``PYTHONHASHSEED`` fixes
it), so a collision is a 2^-64 event per pair of subjects; a hostile writer
who could force one gains nothing it lacks already (it can exhaust anyone's
budget by writing records under their subject). The hashes never leave the
process: the changelog keys are the subjects, and a restore hashes them anew.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from privstream.ledger import _slots

Int64s = npt.NDArray[np.int64]
#: a free row of the table (``hash()`` is never -1)
_EMPTY = -1
_MIN_ROWS = 16


def hashes(subjects: Sequence[bytes]) -> Int64s:
    """The table key of each subject."""
    return np.fromiter(map(hash, subjects), dtype=np.int64, count=len(subjects))


class Spending:
    """Subject hash -> one row of ``width`` int64s; see the module docstring."""

    def __init__(self, *, width: int) -> None:
        self.width = width
        #: (key, slot) pairs, open addressing, at most half full
        self._table = np.full((_MIN_ROWS, 2), _EMPTY, dtype=np.int64)
        #: row ``slot``: what the subject spent (rows past ``len(self)`` are zero)
        self.rows = np.zeros((_MIN_ROWS // 2, width), dtype=np.int64)
        self._size = 0
        #: the subjects of the slots, in slot order: per insert, their bytes joined and their
        #: lengths (read only to tombstone or snapshot; a bytes object per subject held for
        #: the window's life would cost 56 bytes each, and pin the allocator's pools)
        self._names: list[tuple[bytes, npt.NDArray[np.int32]]] = []

    def __len__(self) -> int:
        return self._size

    @property
    def names(self) -> list[bytes]:
        """The subject of each slot, in slot order."""
        names: list[bytes] = []
        for joined, lengths in self._names:
            ends = np.cumsum(lengths).tolist()
            names.extend(map(joined.__getitem__, map(slice, [0, *ends[:-1]], ends)))
        return names

    def get(self, keys: Int64s) -> Int64s:
        """The row of each key (zeros where absent), shape ``(len(keys), width)``."""
        slots, _ = self._find(keys, insert=False)
        return np.where((slots >= 0)[:, None], self.rows[slots], 0)

    def put(self, keys: Int64s, names: Sequence[bytes], rows: Int64s) -> None:
        """Set the row of each key (distinct keys; ``names[i]``: the subject of ``keys[i]``)."""
        slots = self._insert(keys, names)  # first: it may replace self.rows
        self.rows[slots] = rows

    def merge(self, keys: Int64s, names: Sequence[bytes], rows: Int64s) -> None:
        """Like ``put``, but keys may repeat (a restore's colliding subjects): the largest
        row wins, elementwise, so the merged subject keeps the most either spent."""
        slots = self._insert(keys, names)  # first: it may replace self.rows
        np.maximum.at(self.rows, slots, rows)

    def items(self) -> zip[tuple[bytes, Int64s]]:
        """(subject, row) per slot, in slot order."""
        return zip(self.names, self.rows[: len(self)], strict=True)

    def _insert(self, keys: Int64s, names: Sequence[bytes]) -> Int64s:
        self._reserve(len(keys))
        slots, fresh = self._find(keys, insert=True)
        if len(fresh):
            new = names if len(fresh) == len(names) else [names[i] for i in fresh.tolist()]
            lengths = np.fromiter(map(len, new), dtype=np.int32, count=len(new))
            self._names.append((b"".join(new), lengths))
            self._size += len(new)
        return slots

    def _find(self, keys: Int64s, *, insert: bool) -> tuple[Int64s, Int64s]:
        """Each key's slot (-1: absent), and the positions of the keys this call inserted."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        slots = np.empty(len(keys), dtype=np.int64)
        firsts = np.empty(len(keys), dtype=np.int64)
        held = len(self)
        size = _slots.find(self._table, keys, slots, firsts, held, insert)
        return slots, firsts[: size - held]

    def _reserve(self, extra: int) -> None:
        """Grow so that ``extra`` new keys keep the table at most half full."""
        need = len(self) + extra
        capacity = len(self._table)
        if 2 * need <= capacity:
            return
        while 2 * need > capacity:
            capacity *= 2
        live = self._table[:, 0] != _EMPTY
        by_slot = np.empty(len(self), dtype=np.int64)
        by_slot[self._table[live, 1]] = self._table[live, 0]
        self._table = np.full((capacity, 2), _EMPTY, dtype=np.int64)
        # the keys in slot order: inserted afresh, each gets its old slot back
        scratch = np.empty((2, len(by_slot)), dtype=np.int64)
        _slots.find(self._table, by_slot, scratch[0], scratch[1], 0, True)
        rows = np.zeros((capacity // 2, self.width), dtype=np.int64)
        rows[: len(self)] = self.rows[: len(self)]
        self.rows = rows

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

Since the next process draws another hash key, subjects that share a row
now may not later: every subject keeps a changelog record of its own, at
least what it spent (the shared row's value whenever one of its records is
released; ``core`` writes one per subject, even for two of one row in one
batch). ``aliases`` are the subjects known to share a slot with its first:
those a restore meets (``replay`` compares the names of a held hash; its
``merge`` makes them aliases) or ``core`` reports (a collision inside a
batch). ``put`` does not look for them: that would compare each subject's
bytes with its slot's name, a cache miss per subject, the cost this table
exists to avoid. So a subject that first collides in a later batch has a
record the window's tombstones miss; it is harmless (a closed window is
never charged again) and short-lived: a restore reads it and makes it an
alias, and the first charge after the restore tombstones it.
"""

from __future__ import annotations

import bisect
import secrets
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from privstream.errors import MisuseError
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
        #: the table's secret odd multiplier (its home rows: ``_slots.c``)
        self._mix = secrets.randbits(64) | 1
        #: (key, slot) pairs, open addressing, at most half full
        self._table = np.full((_MIN_ROWS, 2), _EMPTY, dtype=np.int64)
        #: row ``slot``: what the subject spent (rows past ``len(self)`` are zero)
        self.rows = np.zeros((_MIN_ROWS // 2, width), dtype=np.int64)
        self._size = 0
        #: the subject of each slot (the first seen), in slot order: per insert, their bytes
        #: joined and where each ends, and the insert's first slot (read to tombstone, to
        #: snapshot, and on a collision; a bytes object per subject for the window's life
        #: would cost 56 bytes each and pin the allocator's pools)
        self._names: list[tuple[bytes, npt.NDArray[np.int64]]] = []
        self._firsts: list[int] = []
        #: other subjects known to share a slot (their hashes collide): subject -> slot
        self.aliases: dict[bytes, int] = {}

    def __len__(self) -> int:
        return self._size

    @property
    def names(self) -> list[bytes]:
        """The subject of each slot (the first seen), in slot order."""
        names: list[bytes] = []
        for joined, ends in self._names:
            stops = ends.tolist()
            names.extend(map(joined.__getitem__, map(slice, [0, *stops[:-1]], stops)))
        return names

    def name(self, slot: int) -> bytes:
        """The subject of one slot (the first seen)."""
        part = bisect.bisect_right(self._firsts, slot) - 1
        joined, ends = self._names[part]
        i = slot - self._firsts[part]
        return joined[int(ends[i - 1]) if i else 0 : int(ends[i])]

    def names_of(self, slots: Int64s) -> list[bytes]:
        """The subject of each slot (the first seen): ``name`` for many, a few numpy
        passes per insert they fall in rather than a bisect each."""
        found: list[bytes] = [b""] * len(slots)
        parts = np.searchsorted(self._firsts, slots, side="right") - 1
        order = np.argsort(parts, kind="stable")
        cuts = np.flatnonzero(np.diff(parts[order])) + 1
        for at in np.split(order, cuts) if len(order) else []:
            joined, ends = self._names[int(parts[at[0]])]
            local = slots[at] - self._firsts[int(parts[at[0]])]
            starts = np.where(local > 0, ends[local - 1], 0).tolist()
            names = map(joined.__getitem__, map(slice, starts, ends[local].tolist()))
            for i, name in zip(at.tolist(), names, strict=True):
                found[i] = name
        return found

    def every_name(self) -> list[bytes]:
        """The subjects held (each slot's first, then the aliases): a window's tombstones."""
        return [*self.names, *self.aliases]

    def get(self, keys: Int64s) -> Int64s:
        """The row of each key (zeros where absent), shape ``(len(keys), width)``."""
        slots, _ = self._find(keys, insert=False)
        return np.where((slots >= 0)[:, None], self.rows[slots], 0)

    def slots(self, keys: Int64s) -> Int64s:
        """The slot of each key (-1 where absent)."""
        return self._find(keys, insert=False)[0]

    def put(
        self, keys: Int64s, names: Sequence[bytes], rows: Int64s, lengths: Int64s | None = None
    ) -> None:
        """Set the row of each key (distinct keys; ``names[i]``: the subject of ``keys[i]``,
        which names the row if the key is new; ``lengths``: of the names, if known)."""
        slots, _ = self._insert(keys, names, rows, lengths)  # first: it may replace self.rows
        self.rows[slots] = rows

    def merge(self, keys: Int64s, names: Sequence[bytes], rows: Int64s) -> None:
        """Like ``put``, but keys may repeat (subjects whose hashes collide): the largest
        row wins, elementwise, so the merged subject keeps the most either spent, and a
        subject that is not its slot's first becomes an alias."""
        slots, fresh = self._insert(keys, names, rows)  # first: it may replace self.rows
        np.maximum.at(self.rows, slots, rows)
        # a key new to the table is named by its own subject; the rest (held before, or
        # twice in this call: rare, a collision) are looked up, a bisect each
        held = np.ones(len(slots), dtype=bool)
        held[fresh] = False
        for i in np.flatnonzero(held).tolist():
            if self.name(int(slots[i])) != names[i]:
                self.aliases.setdefault(names[i], int(slots[i]))

    def every_row(self) -> Int64s:
        """The row of each subject of ``every_name`` (an alias: its slot's row)."""
        if not self.aliases:
            return self.rows[: len(self)]
        return np.concatenate([self.rows[: len(self)], self.rows[list(self.aliases.values())]])

    def items(self) -> zip[tuple[bytes, Int64s]]:
        """(subject, row) of every subject held, as ``every_name`` orders them."""
        return zip(self.every_name(), self.every_row(), strict=True)

    def _insert(
        self, keys: Int64s, names: Sequence[bytes], rows: Int64s, lengths: Int64s | None = None
    ) -> tuple[Int64s, Int64s]:
        """Each key's slot, and the positions of the keys new to the table."""
        given = len(names) if lengths is None else len(lengths)
        if not len(keys) == len(names) == len(rows) == given or rows.shape[1:] != (self.width,):
            raise MisuseError(
                f"Spending: {len(keys)} keys, {len(names)} names and rows of shape "
                f"{rows.shape}; give one name and one row of {self.width} per key"
            )
        self._reserve(len(keys))
        slots, fresh = self._find(keys, insert=True)
        if len(fresh):
            try:
                self._names.append(_joined(names, fresh, lengths))
            except (TypeError, MisuseError):
                # the table holds the new keys at slots past ``len(self)``: a later insert
                # would reuse those slots, and two subjects would share (and overwrite) a row
                self._rebuild(len(self._table), self._size)
                raise
            self._firsts.append(self._size)
            self._size += len(fresh)
        return slots, fresh

    def _find(self, keys: Int64s, *, insert: bool) -> tuple[Int64s, Int64s]:
        """Each key's slot (-1: absent), and the positions of the keys this call inserted."""
        keys = np.asarray(keys)
        if keys.ndim != 1 or (len(keys) and keys.dtype.kind not in "iu"):
            raise MisuseError(
                f"Spending: keys of dtype {keys.dtype} and shape {keys.shape}; give a 1-d "
                "array of int64 (spending.hashes)"
            )
        keys = np.require(keys, dtype=np.int64, requirements=["C", "A"])
        slots = np.empty(len(keys), dtype=np.int64)
        firsts = np.empty(len(keys), dtype=np.int64)
        held = len(self)
        size = _slots.find(self._table, keys, slots, firsts, held, insert, self._mix)
        return slots, firsts[: size - held]

    def _reserve(self, extra: int) -> None:
        """Grow so that ``extra`` new keys keep the table at most half full."""
        need = len(self) + extra
        capacity = len(self._table)
        if 2 * need <= capacity:
            return
        while 2 * need > capacity:
            capacity *= 2
        self._rebuild(capacity, len(self))
        rows = np.zeros((capacity // 2, self.width), dtype=np.int64)
        rows[: len(self)] = self.rows[: len(self)]
        self.rows = rows

    def _rebuild(self, capacity: int, size: int) -> None:
        """A table of ``capacity`` rows holding the keys of slots below ``size``, each at its
        old slot (the keys in slot order, inserted afresh, get 0, 1, 2, ... again)."""
        live = (self._table[:, 0] != _EMPTY) & (self._table[:, 1] < size)
        by_slot = np.empty(size, dtype=np.int64)
        by_slot[self._table[live, 1]] = self._table[live, 0]
        self._table = np.full((capacity, 2), _EMPTY, dtype=np.int64)
        scratch = np.empty((2, size), dtype=np.int64)
        _slots.find(self._table, by_slot, scratch[0], scratch[1], 0, True, self._mix)


def _joined(names: Sequence[bytes], fresh: Int64s, lengths: Int64s | None) -> tuple[bytes, Int64s]:
    """The names at ``fresh`` joined, and where each ends; raises TypeError for a name that
    is not bytes, MisuseError for ``lengths`` that do not add up to the names'."""
    every = len(fresh) == len(names)
    new = names if every else list(map(names.__getitem__, fresh.tolist()))
    joined = b"".join(new)
    if lengths is None:
        ends = np.cumsum(np.fromiter(map(len, new), dtype=np.int64, count=len(new)))
    else:
        ends = np.cumsum(lengths if every else lengths[fresh])
    if int(ends[-1]) != len(joined) or (len(ends) > 1 and (ends[1:] < ends[:-1]).any()):
        raise MisuseError(
            f"Spending: lengths adding up to {int(ends[-1])} bytes for {len(joined)} bytes "
            "of names; give each name's len() or none"
        )
    return joined, ends

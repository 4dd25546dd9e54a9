"""Contribution bounds over a batch at a time, with numpy: the rule of ``Accumulator``.

``Accumulator._admit`` decides record by record, in input order: a unit
(a correlated group, a subject's cell) keeps its first records up to its
limit, and a subject its first ``groups_per_subject`` cells. Which records
that keeps depends on each record's unit and position only, never on a
value, so a batch decides it at once: a record's rank among the batch's
records of its unit, after the ones earlier batches kept (the state here),
is compared with the limit. ``tests/unit/aggregates/test_columnar.py``
checks the batch rule against the record-by-record one.

State, per window: a subject's cells used (one int32 a subject) and, per
(subject, cell) pair kept so far, its 64-bit code and records kept (12
bytes a pair), in sorted arrays; no Python object per pair.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

Ints = NDArray[np.int64]
Mask = NDArray[np.bool_]

#: a pair's code: the subject's id in the high bits, the cell's in the low ones
_CELL_BITS = 32


def ranks(keys: Ints) -> tuple[Ints, Ints, Ints]:
    """Each key's rank among the earlier equal keys (0 for the first), the distinct keys
    (ascending), and each key's index among them (keys from 0)."""
    n = len(keys)
    bits = max(1, n.bit_length())
    if n and int(keys.max()) < 1 << (62 - bits):
        # (key, position) packed in one int64 is unique: an unstable (SIMD) sort of the
        # packed keys orders equal keys by position, several times faster than a stable one
        packed = np.sort((keys << bits) | np.arange(n))
        order, ordered = packed & ((1 << bits) - 1), packed >> bits
    else:
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
    change = np.r_[True, ordered[1:] != ordered[:-1]] if n else np.zeros(0, np.bool_)
    starts = np.flatnonzero(change)
    group = np.cumsum(change) - 1
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - starts[group]
    where = np.empty(n, np.int64)
    where[order] = group
    return rank, ordered[starts], where


def first_records(keys: Ints, kept: Ints, limit: int) -> tuple[Mask, Ints]:
    """Which records a unit keeps when it keeps its first ``limit``: ``keys`` each record's
    unit (in input order), ``kept`` each unit's records kept before (indexed by unit id).
    Returns the verdicts and the units' counts after the batch."""
    if not len(keys):
        return np.zeros(0, np.bool_), kept
    rank, _, _ = ranks(keys)
    admitted = kept[keys] + rank < limit
    after = kept + np.bincount(keys[admitted], minlength=len(kept))
    return admitted, after


class SubjectBounds:
    """Per subject: the first ``groups`` cells, in each the first ``records`` records."""

    def __init__(self, groups: int, records: int) -> None:
        self._groups = groups
        self._records = records
        self._used = np.zeros(0, np.int32)  # cells used, by subject id
        self._pairs = np.zeros(0, np.int64)  # kept (subject, cell) codes, ascending
        self._counts = np.zeros(0, np.int32)  # records kept per pair, as _pairs

    def admit(self, subjects: Ints, cells: Ints, subject_count: int) -> Mask:
        """The verdicts of records (their subject and cell ids, in input order); the state
        goes on with the records kept. ``subject_count``: the subject ids issued so far."""
        if subject_count > len(self._used):
            grown = np.zeros(max(subject_count, 2 * len(self._used)), np.int32)
            grown[: len(self._used)] = self._used
            self._used = grown
        if not len(subjects):
            return np.zeros(0, np.bool_)
        # ranked by compact codes (small enough to sort packed with their positions)
        width = int(cells.max()) + 1
        rank, compact, where = ranks(subjects * width + cells)
        pairs = ((compact // width) << _CELL_BITS) | (compact % width)
        at = np.searchsorted(self._pairs, pairs)
        known = at < len(self._pairs)
        known[known] = self._pairs[at[known]] == pairs[known]
        prior = np.zeros(len(pairs), np.int64)
        prior[known] = self._counts[at[known]]
        opened = self._open_cells(pairs, known, where)
        usable = known | opened
        verdicts = usable[where] & (prior[where] + rank < self._records)
        taken = np.bincount(where[verdicts], minlength=len(pairs))
        self._counts[at[known]] += taken[known].astype(np.int32)
        self._pairs = np.insert(self._pairs, at[opened], pairs[opened])
        self._counts = np.insert(self._counts, at[opened], taken[opened].astype(np.int32))
        return verdicts

    def _open_cells(self, pairs: Ints, known: Mask, where: Ints) -> Mask:
        """Which of the batch's new pairs open a cell for their subject: its first new cells,
        in the order of their first records, while it has fewer than ``groups``."""
        first = np.full(len(pairs), len(where), np.int64)
        np.minimum.at(first, where, np.arange(len(where)))
        new = np.flatnonzero(~known)
        owners = pairs[new] >> _CELL_BITS
        by_owner = np.lexsort((first[new], owners))
        order = new[by_owner]
        rank, _, _ = ranks(owners[by_owner])  # owners in order: each one's new cells counted
        opened = np.zeros(len(pairs), np.bool_)
        opened[order] = self._used[pairs[order] >> _CELL_BITS] + rank < self._groups
        np.add.at(self._used, pairs[opened] >> _CELL_BITS, 1)
        return opened

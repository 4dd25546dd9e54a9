"""Contribution bounds over a batch at a time: the rule of ``Accumulator``.

``Accumulator._admit`` decides record by record, in input order: a unit
(a correlated group, a subject's cell) keeps its first records up to its
limit, and a subject its first ``groups_per_subject`` cells. Which records
that keeps depends on each record's unit and position only, never on a
value, so a batch decides it at once. ``tests/unit/aggregates/test_columnar.py``
checks the batch rule against the record-by-record one.

A subject's bounds are decided record by record in C (``_bounds.admit``:
one hash table probe a record, no sort), the correlated groups' by ranks
with numpy (``first_records``: a record's rank among the batch's records
of its group, after the ones earlier batches kept, against the limit).
State, per window and aggregate: a subject's cells used (one int32 a
subject) and, per (subject, cell) pair kept so far, one row of
``HashRows`` (16 bytes, at least half the rows free); no Python object
per pair.
"""

from __future__ import annotations

import secrets

import numpy as np
from numpy.typing import NDArray

from privstream.aggregates import _bounds

Ints = NDArray[np.int64]
Mask = NDArray[np.bool_]

#: a new table's rows (a power of two, as ``_bounds`` asks)
_FIRST_ROWS = 8


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


class HashRows:
    """One of ``_bounds``' tables: int64 rows of (key, value), -1 a free row, with its
    secret multiplier; grown before a call could fill more than half of it."""

    def __init__(self) -> None:
        self.mix = secrets.randbits(64) | 1
        self.rows = np.full((_FIRST_ROWS, 2), -1, np.int64)

    def room(self, held: int, new: int) -> None:
        """Make room for ``new`` rows beside the ``held`` ones (at most half full)."""
        capacity = len(self.rows)
        while 2 * (held + new) > capacity:
            capacity *= 2
        if capacity > len(self.rows):
            grown = np.full((capacity, 2), -1, np.int64)
            _bounds.rehash(self.rows, grown, self.mix)
            self.rows = grown


class SubjectBounds:
    """Per subject: the first ``groups`` cells, in each the first ``records`` records."""

    def __init__(self, groups: int, records: int) -> None:
        self._groups = groups
        self._records = records
        self._used = np.zeros(0, np.int32)  # cells used, by subject id
        self._pairs = HashRows()  # (subject << 32 | cell, records kept) per pair kept
        self._held = 0  # pairs kept

    def admit(self, subjects: Ints, cells: Ints, subject_count: int) -> Mask:
        """The verdicts of records (their subject and cell ids, in input order); the state
        goes on with the records kept. ``subject_count``: the subject ids issued so far."""
        if subject_count > len(self._used):
            grown = np.zeros(max(subject_count, 2 * len(self._used)), np.int32)
            grown[: len(self._used)] = self._used
            self._used = grown
        verdicts = np.zeros(len(subjects), np.uint8)
        self._pairs.room(self._held, len(subjects))
        self._held = _bounds.admit(
            self._pairs.rows,
            self._used,
            np.ascontiguousarray(subjects, np.int64),
            np.ascontiguousarray(cells, np.int64),
            verdicts,
            self._held,
            self._groups,
            self._records,
            self._pairs.mix,
        )
        return verdicts.view(np.bool_)

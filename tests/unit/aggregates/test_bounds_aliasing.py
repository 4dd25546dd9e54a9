"""Red team 15c: ``_bounds.c`` given buffers or lists that alias each other (a hostile
caller: ``bounding.py`` and ``columnar.py`` never pass them so).

``admit`` reads ``subjects[i]`` again after writing the table, and ``intern`` walks the
units' item array while it appends to ``keys``: an argument that is a view of another
lets the C write out of bounds or read freed memory. Each test states what a sound
``_bounds`` does (refuse the call, or act on each value as first read); ``make csan``
reports the overrun itself. Deterministic: fixed multiplier, no randomness.
"""

from __future__ import annotations

import numpy as np
import pytest
from privstream.aggregates import _bounds


def test_admit_counts_the_subject_it_checked_when_subjects_alias_the_table() -> None:
    """Record 0's subject is row 0's key word (a free row: its value is -1). Cell 1000
    homes to row 0 under multiplier 1 (the top 6 bits of 64 rows), so admitting it writes
    key 1000 there; the C then reads the subject again (1000, unchecked) and counts a cell
    for ``used[1000]``, past ``used``'s one item: here inside a larger array, so the
    stray write lands in memory the test owns and is seen."""
    table = np.full((64, 2), -1, np.int64)
    table[0, 0] = 0
    subjects = table.reshape(-1)[0:1]
    memory = np.zeros(2000, np.int32)
    used = memory[:1]  # its buffer: 4 bytes
    verdicts = np.zeros(1, np.uint8)
    try:
        _bounds.admit(table, used, subjects, np.array([1000], np.int64), verdicts, 0, 1, 1, 1)
    except ValueError:
        return  # refusing overlapping buffers is sound too
    assert memory[1000] == 0, "a cell counted past used's end (used[1000])"
    assert memory[0] == 1 and verdicts.tolist() == [1]


def test_intern_of_its_own_keys_list_reads_no_freed_memory() -> None:
    """``units`` is ``keys``: the first new unit's append reallocates the list's item
    array, which the loop goes on reading (ASan: heap-use-after-free in number_units).
    The cheap sound fix: refuse it, with a ValueError naming keys (a snapshot of the
    units would do too; this test then asks for ids 4 to 7)."""
    keys = [b"k0", b"k1", b"k2", b"k3"]  # a literal: exactly 4 slots, the append moves them
    table = np.full((64, 2), -1, np.int64)
    ids = np.empty(4, np.int64)
    with pytest.raises(ValueError, match="keys"):
        _bounds.intern(table, keys, keys, ids, 12345 | 1)

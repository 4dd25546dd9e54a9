"""Group-by helpers for charging a batch: numpy passes and C-level maps, no per-record calls."""

from __future__ import annotations

from itertools import count, repeat

import numpy as np
import numpy.typing as npt

from privstream.ledger.policy import UNLIMITED
from privstream.ledger.updates import Updates, int64_rows

Int64s = npt.NDArray[np.int64]
Intps = npt.NDArray[np.intp]
Bools = npt.NDArray[np.bool_]
Objects = npt.NDArray[np.object_]


def objects(items: list[bytes]) -> Objects:
    """A 1-d object array of the items (fancy indexing without a Python loop)."""
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


def group(items: list[bytes]) -> tuple[Objects, Intps]:
    """Distinct items (first-seen order) and each item's group index: hashing, no sort
    unless an item repeats."""
    seen: dict[bytes, int] = {}
    # each item's first position (setdefault keeps the first)
    first = np.fromiter(map(seen.setdefault, items, count()), dtype=np.intp, count=len(items))
    if len(seen) == len(items):  # usual: no subject twice in a batch's window
        return objects(items), np.arange(len(items), dtype=np.intp)
    heads, inverse = np.unique(first, return_inverse=True)  # heads ascending: first-seen order
    return objects(items)[heads], inverse.astype(np.intp, copy=False)


def by_value(values: Int64s) -> list[tuple[int, Intps]]:
    """(value, positions) per distinct value; a batch rarely spans more than two windows."""
    distinct = np.unique(values)
    if len(distinct) == 1:
        return [(int(distinct[0]), np.arange(len(values)))]
    return [(int(v), np.flatnonzero(values == v)) for v in distinct.tolist()]


def _heads(inverse: Intps) -> tuple[Intps, Intps, Intps]:
    """The stable order by group, each group's first position in it, and the group sizes."""
    order = np.argsort(inverse, kind="stable")
    ordered = inverse[order]
    heads = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    return order, heads, np.diff(np.r_[heads, len(ordered)])


def ranks(inverse: Intps) -> Int64s:
    """Each item's 1-based rank within its group, in input order."""
    order, heads, sizes = _heads(inverse)
    ranked = np.empty(len(order), dtype=np.int64)
    ranked[order] = np.arange(1, len(order) + 1) - np.repeat(heads, sizes)
    return ranked


def prior_count(inverse: Intps, flags: Bools) -> Int64s:
    """For each item, how many items of its group before it (input order) have the flag."""
    order, heads, sizes = _heads(inverse)
    marked = flags[order].astype(np.int64)
    inclusive = np.cumsum(marked)
    base = np.repeat(inclusive[heads] - marked[heads], sizes)
    prior = np.empty(len(order), dtype=np.int64)
    prior[order] = inclusive - marked - base
    return prior


def allowance(cap: int, spent: Int64s, cost: int) -> Int64s:
    """How many more records of ``cost`` fit under ``cap`` after ``spent`` (0 when none)."""
    if cost == 0:
        return np.full(len(spent), UNLIMITED, dtype=np.int64)
    return np.maximum((cap - spent) // cost, 0)


def lookup(table: dict[bytes, bytes], keys: Objects, zero: bytes) -> Int64s:
    """The big-endian int64s stored under ``keys`` (``zero`` where absent), flat."""
    raw = b"".join(map(table.get, keys.tolist(), repeat(zero)))
    return np.frombuffer(raw, dtype=">i8").astype(np.int64)


def store(
    table: dict[bytes, bytes], names: Objects, values: Int64s, prefix: bytes, updates: Updates
) -> None:
    """``table[name] = row`` (big-endian int64s) and the changelog run ``prefix + name -> row``."""
    if not len(names):
        return
    rows = int64_rows(values, values.size // len(names))
    listed = names.tolist()
    # one bytes object per row (a void view's tolist), without slicing a joined buffer
    table.update(zip(listed, rows.view(f"V{rows.shape[1]}").ravel().tolist(), strict=True))
    updates.add(prefix, listed, rows)

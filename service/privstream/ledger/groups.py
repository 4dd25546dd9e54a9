"""Group-by helpers for charging a batch: numpy passes, no per-record calls."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from privstream.ledger.policy import UNLIMITED

Int64s = npt.NDArray[np.int64]
Intps = npt.NDArray[np.intp]
Bools = npt.NDArray[np.bool_]


def group(keys: Int64s) -> tuple[Intps, Intps]:
    """Each distinct key's first position and each item's group index.

    Usual: no key twice, each item its own group, in input order (one sort to
    see it). Otherwise groups in key order.
    """
    ordered = np.sort(keys)
    if not (ordered[1:] == ordered[:-1]).any():
        every = np.arange(len(keys), dtype=np.intp)
        return every, every
    _, firsts, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return firsts.astype(np.intp, copy=False), inverse.astype(np.intp, copy=False)


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


def ranks(inverse: Intps, groups: int) -> Int64s:
    """Each item's 1-based rank within its group (of ``groups``), in input order."""
    if groups == len(inverse):  # every group of one
        return np.ones(len(inverse), dtype=np.int64)
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

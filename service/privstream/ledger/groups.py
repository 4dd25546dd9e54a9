"""Group-by helpers for charging a batch: numpy passes, no per-record calls."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from privstream.ledger.policy import UNLIMITED

Int64s = npt.NDArray[np.int64]
Intps = npt.NDArray[np.intp]
Bools = npt.NDArray[np.bool_]


def group(keys: Int64s) -> tuple[Intps, Intps]:
    """Each distinct key's first position and each item's group index (one stable sort).

    Usual: no key twice, and each item is its own group, in input order.
    Otherwise groups are in key order.
    """
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    heads = np.empty(len(keys), dtype=bool)
    heads[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=heads[1:])
    if heads.all():
        every = np.arange(len(keys), dtype=np.intp)
        return every, every
    inverse = np.empty(len(keys), dtype=np.intp)
    inverse[order] = np.cumsum(heads) - 1
    return order[heads].astype(np.intp, copy=False), inverse  # stable: a run's head is first


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


def within(inverse: Intps, allowed: Int64s) -> Bools:
    """Each item is among the first ``allowed[g]`` of its group ``g`` (input order)."""
    if (np.bincount(inverse, minlength=len(allowed)) <= allowed).all():  # usual: all fit
        return np.ones(len(inverse), dtype=bool)
    return ranks(inverse) <= allowed[inverse]


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

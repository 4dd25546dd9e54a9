"""The subject ledger: what each subject spent per window, charged a batch at a time.

One ``SubjectLedger`` serves every partition a worker owns; each partition's
state is independent (parallel composition across subjects, and a subject's
records all share one partition). ``charge`` decides a batch in a few numpy
passes rather than one Python call per record:

1. suppress what cannot be charged (no subject, key mismatch, too far in
   the future, window expired) -- elementwise;
2. group the rest by (window, subject): a stable sort, each record's 1-based
   rank in its group in offset order, and the group's allowance ``min((cap -
   spent) // cost, (delta_cap - delta_spent) // delta_cost)`` -- a record is
   within its window's budget iff ``rank <= allowance``;
3. with a lifetime cap, group by subject: a record is over the lifetime cap
   iff the subject's records *within their windows' budgets* before it in
   the batch number at least the lifetime allowance.

Step 3 gives exactly what charging one record at a time gives, checking the
lifetime first and the window second (``tests/unit/ledger/test_charge.py``
compares with that reference): all records cost the same, so the first
``a`` records of a group are admitted and the rest refused, and once a
subject's lifetime is exhausted every later record of the subject is refused
for that reason, whatever its window.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import cast

import numpy as np
import numpy.typing as npt

from privstream.config.ledger import format_duration
from privstream.errors import LedgerError, MisuseError
from privstream.ledger import codec
from privstream.ledger.policy import REASONS, LedgerPolicy, _fits

#: reason codes: 0 admitted, i + 1 for REASONS[i]
_CODE = {reason: i + 1 for i, reason in enumerate(REASONS)}
_REASON_OF: list[str | None] = [None, *REASONS]
Int64s = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Charge:
    """The verdict on one batch of one partition."""

    #: one per record, in the batch's order: released or not
    admitted: Bools
    #: None when admitted, else one of REASONS
    reasons: list[str | None]
    #: changelog (key, value) records to send with the batch; value None = tombstone
    updates: list[tuple[bytes, bytes | None]]


@dataclass
class _Partition:
    #: window start -> {window key: 16-byte spend}
    windows: dict[int, dict[bytes, bytes]] = field(default_factory=dict)
    #: lifetime key -> 8-byte spend
    lifetime: dict[bytes, bytes] = field(default_factory=dict)
    clock: int | None = None
    counts: dict[str, int] = field(default_factory=dict)


class SubjectLedger:
    """Per-partition spending of each subject; see the module docstring and docs/ledger.md."""

    def __init__(self, *, policy: LedgerPolicy) -> None:
        self.policy = policy
        self._partitions: dict[int, _Partition] = {}

    def restore(self, partition: int, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Replay a changelog partition in offset order (last value wins, None deletes)."""
        state = _Partition()
        for key, value in entries:
            _apply(state, key, value)
        lengths = {codec.window_of(key)[1] for windows in state.windows.values() for key in windows}
        foreign = lengths - {self.policy.window_ms}
        if foreign:
            raise LedgerError(
                f"ledger changelog partition {partition}: spending recorded for "
                f"{', '.join(sorted(map(format_duration, foreign)))} windows, but "
                f"privacy.ledger.window is {format_duration(self.policy.window_ms)}; restore "
                "the window setting until those windows have expired (window + grace)"
            )
        self._partitions[partition] = state

    def forget(self, partition: int) -> None:
        """Drop a partition's state (revoked: its next owner restores it from the changelog)."""
        self._partitions.pop(partition, None)

    def snapshot(self, partition: int) -> dict[bytes, bytes]:
        """The partition's ledger as the compacted changelog holds it."""
        state = self._partitions.get(partition, _Partition())
        snap: dict[bytes, bytes] = {}
        for windows in state.windows.values():
            snap.update(windows)
        snap.update(state.lifetime)
        if state.clock is not None:
            snap[codec.CLOCK_KEY] = codec.encode_int(state.clock)
        if state.counts:
            snap[codec.COUNTS_KEY] = codec.encode_counts(state.counts)
        return snap

    def counts(self, partition: int) -> dict[str, int]:
        """Cumulative ``released`` and per-reason counts of the partition (persisted)."""
        state = self._partitions.get(partition, _Partition())
        return {"released": 0, **dict.fromkeys(REASONS, 0), **state.counts}

    def active_subject_windows(self) -> int:
        """(subject, window) pairs held in memory over all partitions (a gauge)."""
        return sum(len(w) for p in self._partitions.values() for w in p.windows.values())

    def charge(
        self,
        partition: int,
        *,
        subjects: Sequence[bytes | None],
        keys: Sequence[bytes | None],
        timestamps_ms: npt.ArrayLike,
        now_ms: int,
    ) -> Charge:
        """Admit or suppress each record of a batch (offset order) and charge the admitted."""
        ts = np.asarray(timestamps_ms, dtype=np.int64).reshape(-1)
        n = len(subjects)
        if len(keys) != n or len(ts) != n:
            raise MisuseError(
                f"charge: {n} subjects, {len(keys)} keys and {len(ts)} timestamps; give one "
                "of each per record"
            )
        state = self._partitions.setdefault(partition, _Partition())
        updates: list[tuple[bytes, bytes | None]] = []
        clock = now_ms if state.clock is None else max(now_ms, state.clock)
        if clock != state.clock:
            state.clock = clock
            updates.append((codec.CLOCK_KEY, codec.encode_int(clock)))
        updates.extend(_expire(state, self.policy, clock))
        codes, starts = self._screen(subjects, keys, ts, clock)
        ok = np.flatnonzero(codes == 0)
        if len(ok):
            ok_subjects = cast(list[bytes], [subjects[i] for i in ok.tolist()])
            codes[ok] = self._spend(state, ok_subjects, starts[ok], updates)
        released = codes == 0
        tally = np.bincount(codes, minlength=len(_REASON_OF))
        for code, count in enumerate(tally.tolist()):
            if count:
                name = "released" if code == 0 else REASONS[code - 1]
                state.counts[name] = state.counts.get(name, 0) + count
        if n:
            updates.append((codec.COUNTS_KEY, codec.encode_counts(state.counts)))
        reasons = list(map(_REASON_OF.__getitem__, codes.tolist()))
        return Charge(admitted=released, reasons=reasons, updates=updates)

    def _screen(
        self,
        subjects: Sequence[bytes | None],
        keys: Sequence[bytes | None],
        ts: Int64s,
        clock: int,
    ) -> tuple[npt.NDArray[np.intp], Int64s]:
        """Reason codes of what cannot be charged (0 elsewhere), and each record's window start."""
        n, policy = len(subjects), self.policy
        missing = np.fromiter(map(operator.is_, subjects, repeat(None)), bool, n)
        mismatch = np.fromiter(map(operator.ne, keys, subjects), bool, n)
        starts = ts - ts % policy.window_ms  # floor, also before 1970
        future = ts > clock + policy.max_future_ms
        late = starts + (policy.window_ms + policy.grace_ms) < clock
        codes = np.zeros(n, dtype=np.intp)
        # the last assignment wins: the most basic reason is reported
        for mask, reason in (
            (late, "late_record"),
            (future, "future_record"),
            (mismatch, "subject_key_mismatch"),
            (missing, "no_subject"),
        ):
            codes[mask] = _CODE[reason]
        return codes, starts

    def _spend(
        self,
        state: _Partition,
        subjects: list[bytes],
        starts: Int64s,
        updates: list[tuple[bytes, bytes | None]],
    ) -> npt.NDArray[np.intp]:
        """Reason codes (0: admitted) of chargeable records; charges the admitted ones."""
        policy = self.policy
        prefix = {s: codec.window_prefix(s, policy.window_ms) for s in np.unique(starts).tolist()}
        wkeys = list(map(operator.add, map(prefix.__getitem__, starts.tolist()), subjects))
        groups, inverse, first = _group(wkeys)
        group_starts = starts[first].tolist()
        spent = _lookup_windows(state, groups, group_starts).reshape(-1, 2)
        allowance = np.minimum(
            _allowance(policy.cap_units, spent[:, 0], policy.cost_units),
            _allowance(policy.delta_cap_units, spent[:, 1], policy.delta_cost_units),
        )
        within = _ranks(inverse) <= allowance[inverse]
        codes = np.where(within, 0, _CODE["budget_exhausted"]).astype(np.intp)
        if policy.lifetime_cap_units is not None:
            life_cap = policy.lifetime_cap_units
            over = _lifetime_over(state, life_cap, policy.cost_units, subjects, within, updates)
            codes[over] = _CODE["lifetime_exhausted"]
        admitted = np.bincount(inverse, weights=codes == 0, minlength=len(groups))
        admitted = admitted.astype(np.int64)
        changed = np.flatnonzero(admitted)
        costs = np.array([policy.cost_units, policy.delta_cost_units], dtype=np.int64)
        values = (spent[changed] + admitted[changed, None] * costs).astype(">i8").tobytes()
        for j, g in enumerate(changed.tolist()):
            value = values[16 * j : 16 * j + 16]
            state.windows.setdefault(group_starts[g], {})[groups[g]] = value
            updates.append((groups[g], value))
        return codes


def _lifetime_over(
    state: _Partition,
    cap: int,
    cost: int,
    subjects: list[bytes],
    within: Bools,
    updates: list[tuple[bytes, bytes | None]],
) -> Bools:
    """Records over the lifetime cap; charges the lifetime of the admitted ones."""
    names, inverse, _ = _group(subjects)
    lkeys = list(map(codec.lifetime_key, names))
    raw = b"".join(map(state.lifetime.get, lkeys, repeat(codec.ZERO_LIFETIME)))
    spent = np.frombuffer(raw, dtype=">i8").astype(np.int64)
    allowance = _allowance(cap, spent, cost)
    over = _prior_count(inverse, within) >= allowance[inverse]
    admitted = np.bincount(inverse, weights=within & ~over, minlength=len(names))
    admitted = admitted.astype(np.int64)
    changed = np.flatnonzero(admitted)
    values = (spent[changed] + admitted[changed] * cost).astype(">i8").tobytes()
    for j, g in enumerate(changed.tolist()):
        value = values[8 * j : 8 * j + 8]
        state.lifetime[lkeys[g]] = value
        updates.append((lkeys[g], value))
    return over


def _group(items: list[bytes]) -> tuple[list[bytes], npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Distinct items (sorted), each item's group index, and each group's first position."""
    array = np.empty(len(items), dtype=object)
    array[:] = items
    distinct, first, inverse = np.unique(array, return_index=True, return_inverse=True)
    return list(distinct), inverse.reshape(-1), first


def _ranks(inverse: npt.NDArray[np.intp]) -> Int64s:
    """Each item's 1-based rank within its group, in input order."""
    order = np.argsort(inverse, kind="stable")
    ordered = inverse[order]
    heads = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    sizes = np.diff(np.r_[heads, len(ordered)])
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[order] = np.arange(1, len(order) + 1) - np.repeat(heads, sizes)
    return ranks


def _prior_count(inverse: npt.NDArray[np.intp], flags: Bools) -> Int64s:
    """For each item, how many items of its group before it (input order) have the flag."""
    order = np.argsort(inverse, kind="stable")
    ordered, marked = inverse[order], flags[order].astype(np.int64)
    heads = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    sizes = np.diff(np.r_[heads, len(ordered)])
    inclusive = np.cumsum(marked)
    base = np.repeat(inclusive[heads] - marked[heads], sizes)
    prior = np.empty(len(order), dtype=np.int64)
    prior[order] = inclusive - marked - base
    return prior


def _allowance(cap: int, spent: Int64s, cost: int) -> Int64s:
    """How many more records of ``cost`` fit under ``cap`` after ``spent`` (0 when none)."""
    if cost == 0:
        return np.full(len(spent), _fits(cap, cost), dtype=np.int64)
    return np.maximum((cap - spent) // cost, 0)


def _lookup_windows(state: _Partition, keys: list[bytes], starts: list[int]) -> Int64s:
    """The (eps, delta) units spent by each key, flat: 2 per key."""
    raw = b"".join(
        state.windows.get(start, {}).get(key, codec.ZERO_SPEND)
        for key, start in zip(keys, starts, strict=True)
    )
    return np.frombuffer(raw, dtype=">i8").astype(np.int64)


def _expire(state: _Partition, policy: LedgerPolicy, clock: int) -> list[tuple[bytes, None]]:
    """Tombstones of every window that ended more than ``grace`` before the clock."""
    span = policy.window_ms + policy.grace_ms
    expired = [start for start in state.windows if start + span < clock]
    return [(key, None) for start in expired for key in state.windows.pop(start)]


#: the value length of each record type (``codec``)
_VALUE_BYTES = {b"W": 16, b"L": 8, b"C": 8}


def _apply(state: _Partition, key: bytes, value: bytes | None) -> None:
    kind = codec.kind_of(key)
    if value is not None and len(value) != _VALUE_BYTES.get(kind, len(value)):
        raise LedgerError(
            f"ledger changelog: a {kind.decode()} record of {len(value)} bytes (version "
            f"{codec.VERSION} writes {_VALUE_BYTES[kind]}); the changelog topic holds something "
            "else: give privacy.ledger.changelog_topic a topic of its own"
        )
    if kind == b"W":
        start, _ = codec.window_of(key)
        if value is None:
            windows = state.windows.get(start, {})
            windows.pop(key, None)
            if not windows:
                state.windows.pop(start, None)
        else:
            state.windows.setdefault(start, {})[key] = value
    elif kind == b"L":
        if value is None:
            state.lifetime.pop(key, None)
        else:
            state.lifetime[key] = value
    elif kind == b"C":
        state.clock = None if value is None else codec.decode_int(value)
    else:
        state.counts = {} if value is None else codec.decode_counts(value)

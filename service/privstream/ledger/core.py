"""The subject ledger: what each subject spent per window, charged a batch at a time.

One ``SubjectLedger`` serves every partition a worker owns; each partition's
state is independent (parallel composition across subjects, and a subject's
records all share one partition). ``charge`` decides a batch in a few numpy
passes rather than one Python call per record:

1. suppress what cannot be charged (no subject, key mismatch, too far in
   the future, window expired) -- elementwise;
2. group the rest by (window, subject) (hashing, then a stable argsort of
   the group ids): each record's 1-based rank in its group in offset order,
   and the group's allowance ``min((cap - spent) // cost, (delta_cap -
   delta_spent) // delta_cost)`` -- a record is within its window's budget
   iff ``rank <= allowance``;
3. with a lifetime cap, group by subject: a record is over the lifetime cap
   iff the subject's records *within their windows' budgets* before it in
   the batch number at least the lifetime allowance. Lifetime spending is
   kept only under a cap, so a partition whose changelog was charged
   without one refuses a cap set later (``restored``): it could not count
   what was released before it.

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
from dataclasses import dataclass
from itertools import islice, repeat
from typing import cast

import numpy as np
import numpy.typing as npt

from privstream.errors import ChangelogError, MisuseError
from privstream.ledger import codec, joint
from privstream.ledger import groups as g
from privstream.ledger.aggregate_charges import AggregateCost
from privstream.ledger.policy import MAX_SUBJECT_BYTES, REASONS, LedgerPolicy
from privstream.ledger.replay import Replay
from privstream.ledger.spending import Spending, hashes
from privstream.ledger.state import PartitionState
from privstream.ledger.updates import Updates, int64_rows

#: reason codes: 0 admitted, i + 1 for REASONS[i]
_CODE = {reason: i + 1 for i, reason in enumerate(REASONS)}
_REASON_OF: list[str | None] = [None, *REASONS]
#: codes at or above this (a key that is not the subject, no subject) are reported first
_MISMATCH_FLOOR = _CODE["subject_key_mismatch"]
Codes = npt.NDArray[np.intp]
#: changelog records a restore folds at a time (the worker's fetches too: ``changelog``)
RESTORE_BATCH = 10_000


@dataclass(frozen=True)
class Charge:
    """The verdict on one batch of one partition."""

    #: one per record, in the batch's order: released or not
    admitted: g.Bools
    #: None when admitted, else one of REASONS
    reasons: list[str | None]
    #: changelog records to send with the batch (iterating: (key, value), None = tombstone)
    updates: Updates
    #: with aggregates: per record and aggregate (config order), whether the record enters
    #: its window of the aggregate (its contribution admitted); None without aggregates
    contributes: g.Bools | None = None


class SubjectLedger:
    """Per-partition spending of each subject; see the module docstring and docs/ledger.md."""

    def __init__(
        self,
        *,
        policy: LedgerPolicy,
        deployment: str,
        aggregates: Sequence[AggregateCost] = (),
    ) -> None:
        self.policy = policy
        #: the aggregates whose contributions it decides and charges before each record
        #: (docs/proofs/ledger-aggregates.md), in config order, each with its plan's id
        self.aggregates = tuple(aggregates)
        for cost in self.aggregates:
            if not cost.partial_id:
                raise MisuseError(
                    f"SubjectLedger: aggregate {cost.name!r} has no partial_id; give "
                    "AggregateCost.of(spec, plan.partial_id): decisions are keyed by it"
                )
        #: who charges (``kafka.group_id``): its marker goes into each partition it charges,
        #: and a restore refuses a changelog another deployment charged (``codec``, ``D``)
        self.deployment = deployment
        self._partitions: dict[int, PartitionState] = {}

    def restore(self, partition: int, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Replay a changelog partition in offset order (``replay``: None deletes, spending
        and the closed past keep their largest value, so a stale write gives nothing back)."""
        replay = self.replay(partition)
        records = iter(entries)
        while chunk := list(islice(records, RESTORE_BATCH)):
            replay.add([key for key, _ in chunk], [value for _, value in chunk])
        self.restored(replay)

    def replay(self, partition: int) -> Replay:
        """A restore of ``partition`` to fold its changelog into as it is read (``Replay.add``,
        then ``restored``): the records are never all held at once."""
        return Replay(partition, self.policy.window_ms, self.deployment)

    def restored(self, replay: Replay) -> None:
        """Take a replayed partition as its ledger (ChangelogError if it is refused)."""
        state = replay.finish()
        capped = self.policy.lifetime_cap_units is not None
        if capped and state.clock is not None and not state.lifetime_kept:
            raise ChangelogError(
                f"ledger changelog partition {replay.partition}: charged without "
                "privacy.ledger.lifetime_epsilon (or while it was unset), so it holds no "
                "lifetime spending and a cap now would not count the records released "
                "before it. Remove lifetime_epsilon, or give "
                "privacy.ledger.changelog_topic a new topic (every budget starts afresh: "
                "docs/ledger.md, Settings)"
            )
        self._partitions[replay.partition] = state

    def forget(self, partition: int) -> None:
        """Drop a partition's state (revoked: its next owner restores it from the changelog)."""
        self._partitions.pop(partition, None)

    def snapshot(self, partition: int) -> dict[bytes, bytes]:
        """The partition's ledger as the compacted changelog holds it."""
        state = self._state(partition)
        snap = state.snapshot()
        if state.marked:
            snap[codec.deployment_key(self.deployment)] = codec.MARK
        if state.lifetime_kept:
            snap[codec.LIFETIME_KEPT] = codec.MARK
        return snap

    def counts(self, partition: int) -> dict[str, int]:
        """Cumulative ``released`` and per-reason counts of the partition (persisted)."""
        return {"released": 0, **dict.fromkeys(REASONS, 0), **self._state(partition).counts}

    def clock(self, partition: int) -> int | None:
        """The partition's clock: the largest time it was charged at (None: never)."""
        return self._state(partition).clock

    def active_subject_windows(self) -> int:
        """(subject, window) pairs and aggregate decisions held in memory over all
        partitions (a gauge: docs/deployment.md sizes memory at 256 bytes for each)."""
        pairs = sum(len(w) for p in self._partitions.values() for w in p.windows.values())
        return pairs + sum(len(p.decisions) for p in self._partitions.values())

    def _state(self, partition: int) -> PartitionState:
        return self._partitions.get(partition) or PartitionState(window_ms=self.policy.window_ms)

    def charge(
        self,
        partition: int,
        *,
        subjects: Sequence[bytes | None],
        keys: Sequence[bytes | None],
        timestamps_ms: npt.ArrayLike,
        now_ms: int,
        misplaced: npt.ArrayLike | None = None,
        aggregate_ms: npt.ArrayLike | None = None,
    ) -> Charge:
        """Admit or suppress each record of a batch (offset order) and charge the admitted.

        ``misplaced`` marks records on another partition than the one their key is
        partitioned to: their subject's ledger may live elsewhere, so charging them here
        would give the subject one budget per partition. ``aggregate_ms`` (with
        aggregates only): each record's time per aggregate, as the aggregate stream places
        it in a window (records x aggregates); each record's undecided contributions are
        decided before its own release (``joint``).
        """
        ts = np.asarray(timestamps_ms, dtype=np.int64).reshape(-1)
        n = len(subjects)
        if len(keys) != n or len(ts) != n:
            raise MisuseError(
                f"charge: {n} subjects, {len(keys)} keys and {len(ts)} timestamps; give one "
                "of each per record"
            )
        state = self._partitions.get(partition)
        if state is None:
            state = self._partitions[partition] = PartitionState(window_ms=self.policy.window_ms)
        updates = Updates()
        if not state.marked:
            updates.put(codec.deployment_key(self.deployment), codec.MARK)
            state.marked = True
        kept = self.policy.lifetime_cap_units is not None
        if kept != state.lifetime_kept:  # a charge without a cap voids the lifetime rows
            updates.put(codec.LIFETIME_KEPT, codec.MARK if kept else None)
            state.lifetime_kept = kept
        clock = now_ms if state.clock is None else max(now_ms, state.clock)
        if clock != state.clock:
            state.clock = clock
            updates.put(codec.CLOCK_KEY, codec.encode_int(clock))
        state.close(self._closed(clock), updates)
        state.decisions.expire(cast(int, state.closed), clock, updates)
        codes, starts = self._screen(subjects, keys, ts, clock, cast(int, state.closed))
        if misplaced is not None:
            wrong = np.asarray(misplaced, dtype=bool).reshape(-1) & (codes < _MISMATCH_FLOOR)
            codes[wrong] = _CODE["subject_partition_mismatch"]
        ok = np.flatnonzero(codes == 0)
        contributes = None
        if self.aggregates:
            times = self._aggregate_times(aggregate_ms, n)
            contributes = np.zeros(times.shape, dtype=bool)
            if len(ok):
                chosen = cast(list[bytes], list(map(subjects.__getitem__, ok.tolist())))
                at = (starts[ok], times[ok])
                codes[ok], contributes[ok] = self._spend_joint(state, chosen, at, updates)
        elif n and len(ok) == n:
            codes = self._spend(state, cast(list[bytes], list(subjects)), starts, updates)
        elif len(ok):
            chosen = cast(list[bytes], list(map(subjects.__getitem__, ok.tolist())))
            codes[ok] = self._spend(state, chosen, starts[ok], updates)
        _tally(state.counts, codes)
        if n:
            updates.put(codec.COUNTS_KEY, codec.encode_counts(state.counts))
        admitted = codes == 0
        if admitted.all():  # usual: no reason to look up
            reasons: list[str | None] = [None] * n
        else:
            reasons = list(map(_REASON_OF.__getitem__, codes.tolist()))
        return Charge(admitted, reasons, updates, contributes)

    def _aggregate_times(self, aggregate_ms: npt.ArrayLike | None, n: int) -> g.Int64s:
        shape = (n, len(self.aggregates))
        times = None if aggregate_ms is None else np.asarray(aggregate_ms, dtype=np.int64)
        if times is None or times.shape != shape:
            found = None if times is None else times.shape
            raise MisuseError(
                f"charge: aggregate times of shape {found} for {n} records and "
                f"{len(self.aggregates)} aggregates; give aggregate_ms of shape {shape}"
            )
        return times

    def _spend_joint(
        self,
        state: PartitionState,
        subjects: list[bytes],
        at: tuple[g.Int64s, g.Int64s],
        updates: Updates,
    ) -> tuple[Codes, g.Bools]:
        """Reason codes (0: admitted) of chargeable records and whether each enters each
        aggregate's window (``at``: their ledger window starts and aggregate times);
        charges records and contributions together, in offset order (``joint``)."""
        starts, times = at
        keys = hashes(subjects)
        window_group = np.empty(len(subjects), dtype=np.intp)
        windows: list[tuple[int, tuple[g.Intps, g.Intps, g.Intps], g.Int64s]] = []
        for start, where in g.by_value(starts):
            firsts, inverse = g.group(keys[where])
            window_group[where] = inverse + sum(len(w[2]) for w in windows)
            before = _spent(state.windows.get(start), keys[where[firsts]], width=2)
            windows.append((start, (where, where[firsts], inverse), before))
        life = g.group(keys) if self.policy.lifetime_cap_units is not None else None
        life_before = None if life is None else _spent(state.lifetime, keys[life[0]], width=1)
        held = joint.Spent(
            window=np.concatenate([w[2] for w in windows]).tolist(),
            life=[] if life_before is None else life_before[:, 0].tolist(),
        )
        group = None if life is None else life[1]
        batch = joint.Batch(subjects, starts, times, window_group, group)
        decided = joint.decide(self.policy, self.aggregates, state.decisions, batch, held, updates)
        after = np.array(held.window, dtype=np.int64).reshape(-1, 2)
        for start, grouping, before in windows:
            rows, after = after[: len(before)], after[len(before) :]
            spending = state.windows.get(start) or Spending(width=2)
            if _write(
                spending, (keys, subjects, grouping), (before, rows), state.prefix(start), updates
            ):
                state.windows[start] = spending
        if life is not None and life_before is not None:
            grouping = (np.arange(len(keys)), *life)
            rows = np.array(held.life, dtype=np.int64)[:, None]
            chosen = (keys, subjects, grouping)
            _write(state.lifetime, chosen, (life_before, rows), codec.LIFETIME, updates)
        outcomes, joined = decided
        return np.asarray(_JOINT_CODES, dtype=np.intp)[outcomes], joined

    def _closed(self, clock: int) -> int:
        """Where the closed past ends at ``clock`` under this policy.

        Window ``s`` is closed once ``s + window + grace < clock``; the largest
        such end ``s + window`` (a multiple of the window) is the largest multiple
        below ``clock - grace``. The partition keeps the largest value it ever
        had (``PartitionState.close``), so a later config cannot reopen a window.
        """
        edge = clock - self.policy.grace_ms - 1
        return edge - edge % self.policy.window_ms

    def _screen(
        self,
        subjects: Sequence[bytes | None],
        keys: Sequence[bytes | None],
        ts: g.Int64s,
        clock: int,
        closed: int,
    ) -> tuple[Codes, g.Int64s]:
        """Reason codes of what cannot be charged (0 elsewhere), and each record's window start."""
        policy = self.policy
        starts = ts - ts % policy.window_ms  # floor, also before 1970
        codes = np.zeros(len(subjects), dtype=np.intp)
        # the last assignment wins: the most basic reason is reported
        codes[starts < closed] = _CODE["late_record"]
        codes[ts > clock + policy.max_future_ms] = _CODE["future_record"]
        if _as_list(keys) != _as_list(subjects):  # one C comparison in the usual batch
            mismatch = np.fromiter(map(operator.ne, keys, subjects), bool, len(subjects))
            codes[mismatch] = _CODE["subject_key_mismatch"]
        if None in subjects:
            missing = np.fromiter(map(operator.is_, subjects, repeat(None)), bool, len(subjects))
            codes[_too_long([s or b"" for s in subjects])] = _CODE["subject_too_long"]
            codes[missing] = _CODE["no_subject"]
        else:
            codes[_too_long(cast(Sequence[bytes], subjects))] = _CODE["subject_too_long"]
        return codes, starts

    def _spend(
        self, state: PartitionState, subjects: list[bytes], starts: g.Int64s, updates: Updates
    ) -> Codes:
        """Reason codes (0: admitted) of chargeable records; charges the admitted ones."""
        policy = self.policy
        keys = hashes(subjects)
        within = np.empty(len(subjects), dtype=bool)
        windows: list[tuple[int, g.Intps, g.Intps, g.Intps, g.Int64s]] = []
        for start, at in g.by_value(starts):
            firsts, inverse = g.group(keys[at])
            firsts = at[firsts]  # each group's first record, as a position in the batch
            spent = _spent(state.windows.get(start), keys[firsts], width=2)
            allowed = np.minimum(
                g.allowance(policy.cap_units, spent[:, 0], policy.cost_units),
                g.allowance(policy.delta_cap_units, spent[:, 1], policy.delta_cost_units),
            )
            within[at] = g.within(inverse, allowed)
            windows.append((start, at, firsts, inverse, spent))
        codes = np.where(within, 0, _CODE["budget_exhausted"]).astype(np.intp)
        if policy.lifetime_cap_units is not None:
            # one window in the batch (the usual case): its groups are the subjects
            grouped = windows[0][2:4] if len(windows) == 1 else g.group(keys)
            over = _lifetime_over(state, policy, (keys, subjects), grouped, within, updates)
            codes[over] = _CODE["lifetime_exhausted"]
        costs = np.array([policy.cost_units, policy.delta_cost_units], dtype=np.int64)
        for start, at, firsts, inverse, spent in windows:
            admitted = np.bincount(inverse, weights=codes[at] == 0, minlength=len(firsts))
            changed = np.flatnonzero(admitted)
            if len(changed):
                at_, groups = _written(subjects, (at, firsts, inverse), changed)
                new = spent[groups] + admitted[groups, None].astype(np.int64) * costs
                spending = state.windows.get(start)
                if spending is None:
                    spending = state.windows[start] = Spending(width=2)
                chosen = (keys, subjects, at_, len(changed))
                _store(spending, chosen, new, state.prefix(start), updates)
        return codes


_Subjects = tuple[g.Int64s, list[bytes]]
#: ``joint``'s outcomes as reason codes
_JOINT_CODES = (0, _CODE["budget_exhausted"], _CODE["lifetime_exhausted"])


def _lifetime_over(
    state: PartitionState,
    policy: LedgerPolicy,
    batch: _Subjects,
    grouped: tuple[g.Intps, g.Intps],
    within: g.Bools,
    updates: Updates,
) -> g.Bools:
    """Records over the lifetime cap (``batch``: each record's key and subject; ``grouped``:
    each subject's first record and each record's subject); charges the admitted ones."""
    cap, cost = cast(int, policy.lifetime_cap_units), policy.cost_units
    keys, subjects = batch
    firsts, inverse = grouped
    spent = _spent(state.lifetime, keys[firsts], width=1)[:, 0]
    over = g.prior_count(inverse, within) >= g.allowance(cap, spent, cost)[inverse]
    admitted = np.bincount(inverse, weights=within & ~over, minlength=len(firsts))
    changed = np.flatnonzero(admitted)
    if len(changed):
        at, groups = _written(subjects, (np.arange(len(keys)), firsts, inverse), changed)
        new = spent[groups] + admitted[groups].astype(np.int64) * cost
        chosen = (keys, subjects, at, len(changed))
        _store(state.lifetime, chosen, new[:, None], codec.LIFETIME, updates)
    return over


def _written(
    subjects: list[bytes], grouping: tuple[g.Intps, g.Intps, g.Intps], changed: g.Intps
) -> tuple[g.Intps, g.Intps]:
    """Whose records a charge writes, as batch positions: the first record of each of the
    ``changed`` groups, then one record of each other subject in them; and the group of each.

    ``grouping``: the positions of the grouped records, each group's first record, and each
    record's group. A group is a hash, so it may hold several subjects (a collision, rare):
    each gets a record of its own with the group's row, since the next process draws
    another hash key and may hold them apart, and a subject's own record must hold at
    least what it spent. Only records repeating a hash of the batch are compared.
    """
    at, firsts, inverse = grouping
    heads = firsts[inverse]  # the position of each record's group's first record
    again = np.flatnonzero(heads != at)
    own = list(map(subjects.__getitem__, at[again].tolist()))
    if list(map(subjects.__getitem__, heads[again].tolist())) == own:
        return firsts[changed], changed
    touched = np.zeros(len(firsts), dtype=bool)
    touched[changed] = True
    others: dict[bytes, tuple[int, int]] = {}  # a colliding subject -> (position, group)
    for j, i in enumerate(again.tolist()):
        if touched[inverse[i]] and own[j] != subjects[heads[i]]:
            others.setdefault(own[j], (int(at[i]), int(inverse[i])))
    extra = np.array(list(others.values()), dtype=np.intp).reshape(-1, 2)
    return np.r_[firsts[changed], extra[:, 0]], np.r_[changed, extra[:, 1]]


def _write(
    spending: Spending,
    batch: tuple[g.Int64s, list[bytes], tuple[g.Intps, g.Intps, g.Intps]],
    rows: tuple[g.Int64s, g.Int64s],
    prefix: bytes,
    updates: Updates,
) -> bool:
    """Store the groups whose rows changed from ``rows[0]`` to ``rows[1]`` (``batch``: each
    record's key and subject, and the grouping of ``_written``); whether any did."""
    keys, subjects, grouping = batch
    before, after = rows
    changed = np.flatnonzero((after != before).any(axis=1))
    if not len(changed):
        return False
    at, groups = _written(subjects, grouping, changed)
    _store(spending, (keys, subjects, at, len(changed)), after[groups], prefix, updates)
    return True


def _spent(spending: Spending | None, keys: g.Int64s, *, width: int) -> g.Int64s:
    """What the subjects of ``keys`` spent, one row each (zeros for the new)."""
    if spending is None:
        return np.zeros((len(keys), width), dtype=np.int64)
    return spending.get(keys)


def _store(
    spending: Spending,
    chosen: tuple[g.Int64s, list[bytes], g.Intps, int],
    rows: g.Int64s,
    prefix: bytes,
    updates: Updates,
) -> None:
    """Set the rows of the subjects at the chosen positions (``_written``: the first
    ``heads`` are of distinct hashes, the rest share their rows), and their changelog run."""
    keys, subjects, at, heads = chosen
    # usual: every record its own subject's, in batch order (``group``), all charged
    usual = heads == len(at) == len(subjects)
    names = subjects if usual else list(map(subjects.__getitem__, at.tolist()))
    # measured once while the subjects are in cache, for the table and the record batch
    lengths = np.fromiter(map(len, names), dtype=np.int64, count=len(names))
    spending.put(keys[at[:heads]], names[:heads], rows[:heads], lengths[:heads])
    if len(at) > heads:  # subjects whose hashes collide with a head's: aliases of its row
        spending.merge(keys[at[heads:]], names[heads:], rows[heads:])
    updates.add(prefix, names, int64_rows(rows, rows.shape[1]), lengths)


def _too_long(subjects: Sequence[bytes]) -> g.Bools | slice:
    """Subjects over ``MAX_SUBJECT_BYTES`` (an empty slice in the usual batch: one C pass)."""
    if max(map(len, subjects), default=0) <= MAX_SUBJECT_BYTES:
        return slice(0)
    return np.fromiter(map(len, subjects), np.int64, len(subjects)) > MAX_SUBJECT_BYTES


def _as_list(items: Sequence[bytes | None]) -> list[bytes | None]:
    return items if isinstance(items, list) else list(items)


def _tally(counts: dict[str, int], codes: Codes) -> None:
    for code, number in enumerate(np.bincount(codes, minlength=len(_REASON_OF)).tolist()):
        if number:
            name = "released" if code == 0 else REASONS[code - 1]
            counts[name] = counts.get(name, 0) + number

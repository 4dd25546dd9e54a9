"""A changelog partition folded into its ledger as it is read: a restore in bounded memory.

A restore replays a changelog partition in offset order: a tombstone
(``None``) deletes the key (``codec``); spending and the closed past keep the
largest value written since (``merged``), so a stale write gives no budget
back; the clock and the counts keep the last value. The
records are not gathered first: ``Replay.add`` folds each batch the reader
fetched straight into the tables the ledger then keeps (a ``Spending`` per
window and one for the lifetime), so a restore holds those tables, one
fetched batch, and a flag per row (live or tombstoned) until ``finish``: no
dictionary of every record, no Python object kept per record. Gathering them
first cost two to three times the ledger's own memory at the peak (issue 30;
``bench/ledger.py`` measures both).

What a record does to its subject's row is ``merged``, the one rule for a
record meeting what the subject held. Subjects whose hashes collide share a
slot: its first subject keeps its own row there, each other one its own row
in ``_Table.aliases`` (rare: a 2^-64 event per pair), and ``finish`` gives
the slot the largest of them, as ``Spending.merge`` does. Rows cannot leave
the hash table, so a table that ends with tombstoned rows or aliases is
rebuilt at ``finish`` from what is live; a window the changelog tombstoned
whole (the usual way a window ends) is dropped as soon as its last live row
goes. The tables grow as a charge grows them, not pre-sized from the
changelog's offsets: a record count bounds the subjects only from above, by
as many records as a subject has in the uncompacted head (one per charge),
and a table sized to it would be kept for the partition's life.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from privstream.config.ledger import format_duration
from privstream.errors import ChangelogError
from privstream.ledger import codec
from privstream.ledger.decisions import Decisions
from privstream.ledger.spending import Int64s, Spending, hashes
from privstream.ledger.state import PartitionState

#: the value length of each record type (``codec``)
_VALUE_BYTES = {
    b"W": 16,
    b"L": 8,
    b"C": 8,
    b"E": 8,
    b"D": len(codec.MARK),
    b"K": len(codec.MARK),
    b"A": codec.DECISION_VALUE_BYTES,
}
_Values = Sequence[bytes | None]
Bools = npt.NDArray[np.bool_]


def merged(held: Int64s, incoming: Int64s) -> Int64s:
    """The rows subjects hold after their next changelog records (one row each, ``held``:
    what their earlier records left since their last tombstone): each unit keeps the
    largest value. Spending only grows until its window closes, so a stale write (a worker
    that lost the partition, committing lower values after its new owner's) gives nothing
    back (docs/ledger.md, "Stale writes")."""
    return np.maximum(held, incoming)


class Replay:
    """One partition's changelog, folded batch by batch (``add``), then ``finish``."""

    def __init__(self, partition: int, window_ms: int, deployment: str) -> None:
        self.partition = partition
        self.window_ms = window_ms
        #: the deployment restoring it (``codec``, record ``D``)
        self.deployment = deployment
        #: the deployments whose markers the changelog holds
        self._deployments: set[str] = set()
        #: the ``K`` record: every charge was made under a lifetime cap
        self._lifetime_kept = False
        #: (window start, window length) -> its table; windows of another length than
        #: ``window_ms`` are kept only to refuse the changelog if any is live at the end
        self._windows: dict[tuple[int, int], _Table] = {}
        self._lifetime = _Table(kind=b"L")
        self._clock: int | None = None
        self._closed: int | None = None
        self._counts: dict[str, int] = {}
        #: the aggregate contributions decided (the last row of a key wins)
        self._decisions = Decisions()
        #: changelog records folded so far
        self.records = 0

    def add(self, keys: Sequence[bytes], values: _Values) -> None:
        """Fold the next changelog records (offset order)."""
        self.records += len(keys)
        head = _one_window(keys)
        if head is not None:  # usual: a batch of one window's records, C loops only
            self._fold(head, list(map(_NAME, keys)), values)
            return
        runs: dict[bytes, tuple[list[bytes], list[bytes | None]]] = {}
        for key, value in zip(keys, values, strict=True):
            lead = key[:2]  # checked in full per record only off the usual path (``_kind``)
            if lead == codec.WINDOW and len(key) >= codec.WINDOW_PREFIX_LEN:
                head, name = key[: codec.WINDOW_PREFIX_LEN], key[codec.WINDOW_PREFIX_LEN :]
            elif lead == codec.LIFETIME:
                head, name = lead, key[len(lead) :]
            else:
                self._scalar(key, _kind(key, value), value)
                continue
            run = runs.get(head)
            if run is None:
                run = runs[head] = ([], [])
            run[0].append(name)
            run[1].append(value)
        for head, (names, run_values) in runs.items():
            self._fold(head, names, run_values)

    def finish(self) -> PartitionState:
        """The partition's ledger; ChangelogError if it holds live spending under another
        window length, or another deployment's marker."""
        self._refuse_shared()
        foreign = sorted({length for _, length in self._windows} - {self.window_ms})
        if foreign:
            raise ChangelogError(
                f"ledger changelog partition {self.partition}: spending recorded for "
                f"{', '.join(map(format_duration, foreign))} windows, but "
                f"privacy.ledger.window is {format_duration(self.window_ms)}; restore the "
                "window setting until those windows have expired (window + grace)"
            )
        return PartitionState(
            window_ms=self.window_ms,
            windows={start: table.finish() for (start, _), table in self._windows.items()},
            lifetime=self._lifetime.finish(),
            clock=self._clock,
            closed=self._closed,
            counts=self._counts,
            marked=self.deployment in self._deployments,
            lifetime_kept=self._lifetime_kept,
            decisions=self._decisions,
        )

    def _refuse_shared(self) -> None:
        """Two deployments sharing a changelog each restore the other's spending (compaction
        keeps whichever wrote a subject's row last): refused, whatever the topic's name."""
        others = sorted(self._deployments - {self.deployment})
        if others:
            raise ChangelogError(
                f"ledger changelog partition {self.partition}: also charged by deployment "
                f"(kafka.group_id) {', '.join(map(repr, others))}, while this one is "
                f"{self.deployment!r}; two deployments sharing a changelog each restore the "
                "other's spending. Give each its own privacy.ledger.changelog_topic (a new "
                "topic starts every budget afresh: docs/ledger.md, Two deployments)"
            )

    def _fold(self, head: bytes, names: list[bytes], values: _Values) -> None:
        if head == codec.LIFETIME:
            self._lifetime.fold(names, values)
            return
        window = codec.window_of(head)
        table = self._windows.get(window)
        if table is None:
            table = self._windows[window] = _Table(kind=b"W")
        table.fold(names, values)
        if table.empty:  # tombstoned whole (or tombstones of subjects never held)
            del self._windows[window]

    def _scalar(self, key: bytes, kind: bytes, value: bytes | None) -> None:
        if kind == b"D":
            name = key[len(codec.DEPLOYMENT) :].decode(errors="replace")
            if value is None:
                self._deployments.discard(name)
            else:
                self._deployments.add(name)
        elif kind == b"A":
            self._decisions.fold(key, value)
        elif kind == b"K":
            self._lifetime_kept = value is not None
        elif kind == b"C":
            self._clock = None if value is None else codec.decode_int(value)
        elif kind == b"E":  # only moves forward: a stale lower one never reopens a window
            closed = None if value is None else codec.decode_int(value)
            held = self._closed
            self._closed = closed if held is None or closed is None else max(held, closed)
        else:
            self._counts = {} if value is None else codec.decode_counts(value)


class _Table:
    """One window's (or the lifetime's) spending while it is restored."""

    def __init__(self, *, kind: bytes) -> None:
        self.kind = kind
        self.spending = Spending(width=_VALUE_BYTES[kind] // 8)
        #: per slot: its first subject's last record is a value, not a tombstone
        self._live = np.zeros(0, dtype=bool)
        self._held = 0  # live slots
        #: subjects sharing a slot with its first subject (hashes collide): their own row
        self.aliases: dict[bytes, Int64s] = {}

    @property
    def empty(self) -> bool:
        return not self._held and not self.aliases

    def fold(self, names: list[bytes], values: _Values) -> None:
        """Fold records of this table (offset order): a subject's records in turn."""
        keys = hashes(names)
        rounds = _rounds(keys)
        if rounds is None:  # usual: one record per subject in the batch
            self._fold_distinct(keys, names, values)
            return
        for at in rounds:
            picks = at.tolist()
            chosen = list(map(names.__getitem__, picks)), list(map(values.__getitem__, picks))
            self._fold_distinct(keys[at], *chosen)

    def finish(self) -> Spending:
        """The table as the ledger keeps it."""
        spending, width = self.spending, self.spending.width
        if self._held == len(spending) and not self.aliases:
            return spending  # usual: every subject live, none sharing a slot
        live = np.flatnonzero(self._live[: len(spending)])
        every = spending.names
        names = [*map(every.__getitem__, live.tolist()), *self.aliases]
        rows = np.concatenate([spending.rows[live], *(r[None] for r in self.aliases.values())])
        rebuilt = Spending(width=width)
        if names:
            rebuilt.merge(hashes(names), names, rows.reshape(-1, width))
        return rebuilt

    def _fold_distinct(self, keys: Int64s, names: list[bytes], values: _Values) -> None:
        """Fold records of distinct keys."""
        dead = np.fromiter(map(_is_none, values), dtype=bool, count=len(values))
        rows = _rows(values, dead, self.kind)
        slots = self.spending.slots(keys)
        held = slots >= 0
        if held.any():
            self._update(np.flatnonzero(held), slots, names, (rows, dead))
        new = np.flatnonzero(~held & ~dead)  # a tombstone of a subject not held: nothing
        if len(new):
            before = len(self.spending)
            self.spending.put(keys[new], list(map(names.__getitem__, new.tolist())), rows[new])
            self._mark(np.arange(before, len(self.spending)), True)

    def _update(
        self, at: Int64s, slots: Int64s, names: list[bytes], read: tuple[Int64s, Bools]
    ) -> None:
        """Fold the records at ``at``, whose keys the table holds (``slots``)."""
        rows, dead = read
        held = self.spending.names_of(slots[at])
        own = np.fromiter(
            map(operator.eq, held, map(names.__getitem__, at.tolist())), dtype=bool, count=len(at)
        )
        mine = at[own]
        self._mark(slots[mine[dead[mine]]], False)
        put = mine[~dead[mine]]
        if len(put):
            where, was = slots[put], self._live[slots[put]]
            held = self.spending.rows[where]
            self.spending.rows[where] = np.where(was[:, None], merged(held, rows[put]), rows[put])
            self._mark(where, True)
        for i in at[~own].tolist():  # another subject of a held hash (a collision: rare)
            alias = names[i]
            if dead[i]:
                self.aliases.pop(alias, None)
            else:
                earlier = self.aliases.get(alias)
                row = rows[i] if earlier is None else merged(earlier, rows[i])
                self.aliases[alias] = row.copy()  # not a view keeping the batch's rows

    def _mark(self, slots: Int64s, live: bool) -> None:
        """Set the slots' flags (distinct slots), counting the live ones."""
        if len(self._live) < len(self.spending.rows):
            grown = np.zeros(len(self.spending.rows), dtype=bool)
            grown[: len(self._live)] = self._live
            self._live = grown
        before = int(self._live[slots].sum())
        self._live[slots] = live
        self._held += (len(slots) if live else 0) - before


_LEAD = operator.itemgetter(slice(0, len(codec.WINDOW)))
_HEAD = operator.itemgetter(slice(0, codec.WINDOW_PREFIX_LEN))
_NAME = operator.itemgetter(slice(codec.WINDOW_PREFIX_LEN, None))


def _one_window(keys: Sequence[bytes]) -> bytes | None:
    """The key prefix (``codec.window_prefix``) if every key is a record of that window."""
    n = len(keys)
    if not n or list(map(_LEAD, keys)).count(codec.WINDOW) != n:
        return None
    if min(map(len, keys)) < codec.WINDOW_PREFIX_LEN:
        return None
    heads = list(map(_HEAD, keys))
    return heads[0] if heads.count(heads[0]) == n else None


def _rounds(keys: Int64s) -> list[Int64s] | None:
    """None if the keys are distinct; else the positions of each key's first record, of
    each key's second, and so on (each in offset order)."""
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    repeat = ordered[1:] == ordered[:-1]
    if not repeat.any():
        return None
    starts = np.flatnonzero(np.r_[True, ~repeat])
    run = np.repeat(starts, np.diff(np.r_[starts, len(keys)]))
    rank = np.empty(len(keys), dtype=np.int64)
    rank[order] = np.arange(len(keys)) - run  # each record's place among its key's records
    by_rank = np.argsort(rank, kind="stable")
    ends = np.cumsum(np.bincount(rank))
    return np.split(by_rank, ends[:-1])


def _rows(values: _Values, dead: Bools, kind: bytes) -> Int64s:
    """The rows of ``kind``'s records (zeros for tombstones), decoded from their big-endian
    values; a negative one (never written) reads as 0, as the replay into zeroed rows
    always read it."""
    live = [v for v in values if v is not None] if dead.any() else values
    lengths = np.fromiter(map(len, live), dtype=np.int64, count=len(live))  # type: ignore[arg-type]
    wrong = np.flatnonzero(lengths != _VALUE_BYTES[kind])
    if len(wrong):
        raise _wrong_length(kind, int(lengths[wrong[0]]))
    joined = b"".join(live)  # type: ignore[arg-type]  # the tombstones left out
    width = _VALUE_BYTES[kind] // 8
    decoded = np.maximum(np.frombuffer(joined, dtype=">i8").astype(np.int64), 0)
    if len(live) == len(values):
        return decoded.reshape(-1, width)
    rows = np.zeros((len(values), width), dtype=np.int64)
    rows[~dead] = decoded.reshape(-1, width)
    return rows


def _is_none(value: bytes | None) -> bool:
    return value is None


def _kind(key: bytes, value: bytes | None) -> bytes:
    """The record's type (``codec.kind_of``), its value's length checked."""
    kind = codec.kind_of(key)
    if value is not None and len(value) != _VALUE_BYTES.get(kind, len(value)):
        raise _wrong_length(kind, len(value))
    return kind


def _wrong_length(kind: bytes, length: int) -> ChangelogError:
    return ChangelogError(
        f"ledger changelog: a {kind.decode()} record of {length} bytes (version "
        f"{codec.VERSION} writes {_VALUE_BYTES[kind]}); the changelog topic holds something "
        "else: give privacy.ledger.changelog_topic a topic of its own"
    )

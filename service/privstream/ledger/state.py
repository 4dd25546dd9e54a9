"""One partition's ledger in memory, and its changelog form (``codec``).

Windows are held per start, each a ``Spending`` (subject -> epsilon and
delta units), so a window expires as a whole and a subject is stored once per
window (the changelog key ``prefix + subject`` is only built for what is
written). A restore replays the changelog into dicts (a tombstone deletes;
spending and the closed past keep the largest value written since, so a
stale write from a worker that lost the partition gives no budget back) and
then loads each into a ``Spending``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from privstream.config.ledger import format_duration
from privstream.errors import LedgerError
from privstream.ledger import codec
from privstream.ledger.spending import Spending, hashes
from privstream.ledger.updates import Updates, int64_rows

#: the value length of each record type (``codec``)
_VALUE_BYTES = {b"W": 16, b"L": 8, b"C": 8, b"E": 8}


@dataclass
class PartitionState:
    window_ms: int
    #: window start -> what each subject spent in it (epsilon and delta units)
    windows: dict[int, Spending] = field(default_factory=dict)
    #: what each subject spent over its lifetime (epsilon units)
    lifetime: Spending = field(default_factory=lambda: Spending(width=1))
    clock: int | None = None
    #: windows starting before this are closed for good (``codec``, record ``E``)
    closed: int | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def prefix(self, start: int) -> bytes:
        return codec.window_prefix(start, self.window_ms)

    def snapshot(self) -> dict[bytes, bytes]:
        """The compacted changelog of this state (each subject at its row's value, at least
        what the changelog holds; a subject that first shared a row in a later batch is
        missing until a restore: ``spending``)."""
        snap: dict[bytes, bytes] = {}
        for start, spending in self.windows.items():
            snap.update(_records(self.prefix(start), spending))
        snap.update(_records(codec.LIFETIME, self.lifetime))
        if self.clock is not None:
            snap[codec.CLOCK_KEY] = codec.encode_int(self.clock)
        if self.closed is not None:
            snap[codec.CLOSED_KEY] = codec.encode_int(self.closed)
        if self.counts:
            snap[codec.COUNTS_KEY] = codec.encode_counts(self.counts)
        return snap

    def close(self, closed: int, updates: Updates) -> None:
        """Move the closed past forward to ``closed`` (the record), and tombstone every window
        held that starts before the closed past: the ones it just closed, and any a restore
        read back (records of subjects that collided, ``spending``: never charged again)."""
        if self.closed is None or closed > self.closed:
            self.closed = closed
            updates.put(codec.CLOSED_KEY, codec.encode_int(closed))
        for start in [s for s in self.windows if s < self.closed]:
            updates.add(self.prefix(start), self.windows.pop(start).every_name(), None)


def _records(prefix: bytes, spending: Spending) -> dict[bytes, bytes]:
    """The changelog records ``prefix + subject -> row`` of a ``Spending`` (every subject)."""
    rows = int64_rows(spending.every_row(), spending.width)
    return dict(zip(map(prefix.__add__, spending.every_name()), map(bytes, rows), strict=True))


def restored(
    partition: int, window_ms: int, entries: Iterable[tuple[bytes, bytes | None]]
) -> PartitionState:
    """Replay changelog records in offset order: None deletes; spending and the closed past
    keep the largest value since (``_keep_max``), the rest the last."""
    state = _Replay(window_ms=window_ms)
    foreign: dict[bytes, bytes] = {}  # live spending under another window length
    for key, value in entries:
        _apply(state, key, value, foreign)
    if foreign:
        lengths = sorted({codec.window_of(key)[1] for key in foreign})
        raise LedgerError(
            f"ledger changelog partition {partition}: spending recorded for "
            f"{', '.join(map(format_duration, lengths))} windows, but privacy.ledger.window "
            f"is {format_duration(window_ms)}; restore the window setting until those windows "
            "have expired (window + grace)"
        )
    return PartitionState(
        window_ms=window_ms,
        windows={start: _loaded(spent, 2) for start, spent in state.windows.items()},
        lifetime=_loaded(state.lifetime, 1),
        clock=state.clock,
        closed=state.closed,
        counts=state.counts,
    )


@dataclass
class _Replay:
    """A partition's changelog replayed record by record, each table a dict of values."""

    window_ms: int
    windows: dict[int, dict[bytes, bytes]] = field(default_factory=dict)
    lifetime: dict[bytes, bytes] = field(default_factory=dict)
    clock: int | None = None
    closed: int | None = None
    counts: dict[str, int] = field(default_factory=dict)


def _loaded(values: dict[bytes, bytes], width: int) -> Spending:
    """A ``Spending`` of the replayed values (subjects whose hashes collide: the largest)."""
    names = list(values)
    rows = np.frombuffer(b"".join(values.values()), dtype=">i8").astype(np.int64)
    spending = Spending(width=width)
    spending.merge(hashes(names), names, rows.reshape(-1, width))
    return spending


def _apply(state: _Replay, key: bytes, value: bytes | None, foreign: dict[bytes, bytes]) -> None:
    kind = codec.kind_of(key)
    if value is not None and len(value) != _VALUE_BYTES.get(kind, len(value)):
        raise LedgerError(
            f"ledger changelog: a {kind.decode()} record of {len(value)} bytes (version "
            f"{codec.VERSION} writes {_VALUE_BYTES[kind]}); the changelog topic holds something "
            "else: give privacy.ledger.changelog_topic a topic of its own"
        )
    if kind == b"W":
        start, length = codec.window_of(key)
        if length != state.window_ms:
            _set(foreign, key, value)
            return
        _keep_max(state.windows.setdefault(start, {}), key[codec.WINDOW_PREFIX_LEN :], value)
        if not state.windows[start]:
            del state.windows[start]
    elif kind == b"L":
        _keep_max(state.lifetime, key[len(codec.LIFETIME) :], value)
    elif kind == b"C":
        state.clock = None if value is None else codec.decode_int(value)
    elif kind == b"E":  # only moves forward: a stale lower one never reopens a window
        closed = None if value is None else codec.decode_int(value)
        state.closed = (
            closed if state.closed is None or closed is None else max(state.closed, closed)
        )
    else:
        state.counts = {} if value is None else codec.decode_counts(value)


def _keep_max(table: dict[bytes, bytes], name: bytes, value: bytes | None) -> None:
    """Spending only grows until its window closes (a tombstone): each unit keeps the
    largest value written since the key's last tombstone, so a stale write (a worker that
    lost the partition, committing lower values after its new owner's) gives nothing back
    (docs/ledger.md, "Stale writes")."""
    held = table.get(name)
    if value is None or held is None or len(held) != len(value):
        _set(table, name, value)
        return
    width = len(value) // 8
    old, new = struct.unpack(f">{width}q", held), struct.unpack(f">{width}q", value)
    table[name] = struct.pack(f">{width}q", *map(max, old, new))


def _set(table: dict[bytes, bytes], name: bytes, value: bytes | None) -> None:
    if value is None:
        table.pop(name, None)
    else:
        table[name] = value

"""One partition's ledger in memory, and its changelog form (``codec``).

Windows are held per start, each a dict ``subject -> 16-byte spend``, so a
window expires as a whole and a subject is stored once per window (the
changelog key ``prefix + subject`` is only built for what is written).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from privstream.config.ledger import format_duration
from privstream.errors import LedgerError
from privstream.ledger import codec
from privstream.ledger.updates import Updates

#: the value length of each record type (``codec``)
_VALUE_BYTES = {b"W": 16, b"L": 8, b"C": 8, b"E": 8}


@dataclass
class PartitionState:
    window_ms: int
    #: window start -> {subject: eps_units:q delta_units:q}
    windows: dict[int, dict[bytes, bytes]] = field(default_factory=dict)
    #: subject -> eps_units:q over the lifetime
    lifetime: dict[bytes, bytes] = field(default_factory=dict)
    clock: int | None = None
    #: windows starting before this are closed for good (``codec``, record ``E``)
    closed: int | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def prefix(self, start: int) -> bytes:
        return codec.window_prefix(start, self.window_ms)

    def snapshot(self) -> dict[bytes, bytes]:
        """The compacted changelog of this state."""
        snap: dict[bytes, bytes] = {}
        for start, spent in self.windows.items():
            snap.update(zip(map(self.prefix(start).__add__, spent), spent.values(), strict=True))
        snap.update(
            zip(map(codec.LIFETIME.__add__, self.lifetime), self.lifetime.values(), strict=True)
        )
        if self.clock is not None:
            snap[codec.CLOCK_KEY] = codec.encode_int(self.clock)
        if self.closed is not None:
            snap[codec.CLOSED_KEY] = codec.encode_int(self.closed)
        if self.counts:
            snap[codec.COUNTS_KEY] = codec.encode_counts(self.counts)
        return snap

    def close(self, closed: int, updates: Updates) -> None:
        """Move the closed past forward to ``closed``: the record, and the tombstones of every
        window that starts before it."""
        if self.closed is not None and closed <= self.closed:
            return
        self.closed = closed
        updates.put(codec.CLOSED_KEY, codec.encode_int(closed))
        for start in [s for s in self.windows if s < closed]:
            updates.add(self.prefix(start), list(self.windows.pop(start)), None)


def restored(
    partition: int, window_ms: int, entries: Iterable[tuple[bytes, bytes | None]]
) -> PartitionState:
    """Replay changelog records in offset order (last value wins, None deletes)."""
    state = PartitionState(window_ms=window_ms)
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
    return state


def _apply(
    state: PartitionState, key: bytes, value: bytes | None, foreign: dict[bytes, bytes]
) -> None:
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
        _set(state.windows.setdefault(start, {}), key[codec.WINDOW_PREFIX_LEN :], value)
        if not state.windows[start]:
            del state.windows[start]
    elif kind == b"L":
        _set(state.lifetime, key[len(codec.LIFETIME) :], value)
    elif kind == b"C":
        state.clock = None if value is None else codec.decode_int(value)
    elif kind == b"E":
        state.closed = None if value is None else codec.decode_int(value)
    else:
        state.counts = {} if value is None else codec.decode_counts(value)


def _set(table: dict[bytes, bytes], name: bytes, value: bytes | None) -> None:
    if value is None:
        table.pop(name, None)
    else:
        table[name] = value

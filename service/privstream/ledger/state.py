"""One partition's ledger in memory, and its changelog form (``codec``).

Windows are held per start, each a ``Spending`` (subject -> epsilon and
delta units), so a window expires as a whole and a subject is stored once per
window (the changelog key ``prefix + subject`` is only built for what is
written). A restore folds the changelog into these tables as it reads it
(``replay``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from privstream.ledger import codec
from privstream.ledger.decisions import Decisions
from privstream.ledger.spending import Spending
from privstream.ledger.updates import Updates, int64_rows


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
    #: the changelog holds this deployment's marker (``codec``, record ``D``)
    marked: bool = False
    #: every charge since the partition's first was made under a lifetime cap (``K``)
    lifetime_kept: bool = False
    #: each aggregate contribution decided, until it expires (``codec``, record ``A``)
    decisions: Decisions = field(default_factory=Decisions)

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
        snap.update(self.decisions.snapshot())
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

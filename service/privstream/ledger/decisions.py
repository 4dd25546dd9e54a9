"""One partition's decisions on aggregate contributions, and their changelog rows.

A contribution ``(s, a, w, W)`` is admitted once, by the record path's ledger, at the
first record of it the ledger's screen passes that fits the caps
(docs/proofs/ledger-aggregates.md, steps 1, 7 and 8); the admission is a changelog
record (``codec``, ``A``) written in the batch's transaction beside the charge it made.
A refusal is neither held nor written: the subject's spending only grows while ``W`` is
open, so deciding the contribution again at its next record refuses it again (the proof,
"Refusals are not kept"). Held per ledger window, so that closing one drops
its decisions without looking at the others; a decision is kept until both its ledger
window is closed and its aggregate window's end plus grace has passed on the partition's
clock (step 8: the aggregate stream reads it until then). A replay folds the rows back:
the last one of a key wins, a tombstone deletes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from privstream.ledger import codec
from privstream.ledger.updates import Updates

#: (kept until, admitted)
Held = tuple[int, bool]


@dataclass
class Decisions:
    """Ledger window start -> decision key (``codec.decision_prefix`` + subject) -> held,
    and the same keys by when they may go, so that expiring reads only what it deletes."""

    by_window: dict[int, dict[bytes, Held]] = field(default_factory=dict)
    #: ledger window start -> kept until -> the keys kept until then; a key may stay listed
    #: after its row is gone or kept longer (``expire`` checks each against ``by_window``)
    by_expiry: dict[int, dict[int, list[bytes]]] = field(default_factory=dict)
    #: one tuple per distinct value held (a window's decisions share their kept until):
    #: about 90 bytes a decision less (docs/deployment.md sizes them)
    _shared: dict[Held, Held] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return sum(map(len, self.by_window.values()))

    def get(self, ledger_start: int, key: bytes) -> bool | None:
        """Whether the contribution of ``key`` was admitted (None: never decided)."""
        held = self.by_window.get(ledger_start, {}).get(key)
        return None if held is None else held[1]

    def put(self, ledger_start: int, key: bytes, held: Held, updates: Updates) -> None:
        """Keep a new decision and write its row."""
        self._keep(ledger_start, key, held)
        updates.put(key, codec.encode_decision(*held))

    def fold(self, key: bytes, value: bytes | None) -> None:
        """A changelog row read back (offset order): the last of a key wins."""
        start = codec.decision_of(key)[0]
        if value is None:
            window = self.by_window.get(start, {})
            window.pop(key, None)
            if not window:  # the aggregate stream never expires: this drops its index too
                self._drop(start)
        else:
            self._keep(start, key, codec.decode_decision(value))

    def expire(self, closed: int, clock: int, updates: Updates) -> None:
        """Tombstone the decisions of ledger windows starting before ``closed`` (the closed
        past: no record of them is charged again) whose aggregate window's end plus grace is
        before ``clock``."""
        for start in [s for s in self.by_expiry if s < closed]:
            buckets = self.by_expiry[start]
            window = self.by_window.get(start, {})
            for kept in [k for k in buckets if k < clock]:
                self._unshare(kept)
                for key in buckets.pop(kept):
                    held = window.get(key)
                    if held is not None and held[0] == kept:
                        del window[key]
                        updates.put(key, None)
            if not window:
                self._drop(start)

    def snapshot(self) -> dict[bytes, bytes]:
        """Every decision held, as the compacted changelog holds it."""
        return {
            key: codec.encode_decision(*held)
            for window in self.by_window.values()
            for key, held in window.items()
        }

    def _drop(self, start: int) -> None:
        """Forget a ledger window none of whose decisions is held (its index lists only
        keys gone)."""
        self.by_window.pop(start, None)
        for kept in self.by_expiry.pop(start, {}):
            self._unshare(kept)

    def _unshare(self, kept: int) -> None:
        """Stop sharing the values kept until ``kept`` (another window's that still holds
        one keeps it; only later copies are not shared)."""
        self._shared.pop((kept, True), None)
        self._shared.pop((kept, False), None)

    def _keep(self, start: int, key: bytes, held: Held) -> None:
        held = self._shared.setdefault(held, held)
        self.by_window.setdefault(start, {})[key] = held
        self.by_expiry.setdefault(start, {}).setdefault(held[0], []).append(key)

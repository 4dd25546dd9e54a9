"""``ledger.decisions``: the expiry index deletes what is due and nothing else, and the
aggregate stream's copy (fold only, never expired) keeps no index of rows gone.

Every input is fixed: no test here can fail by chance (false-failure probability 0).
"""

from __future__ import annotations

from privstream.ledger import codec
from privstream.ledger.decisions import Decisions
from privstream.ledger.updates import Updates

HOUR = 3_600_000
PLAN = b"p" * 32


def _key(ledger_start: int, aggregate_start: int, subject: bytes) -> bytes:
    return codec.decision_prefix((ledger_start, HOUR), aggregate_start, PLAN) + subject


def _written(updates: Updates) -> dict[bytes, bytes | None]:
    return dict(updates)


def test_expire_tombstones_the_due_decisions_of_closed_windows_only() -> None:
    decisions, setup = Decisions(), Updates()
    due = _key(0, 0, b"due")
    later = _key(0, 0, b"later")  # kept past the clock
    open_window = _key(HOUR, 0, b"open")  # its ledger window is not closed
    decisions.put(0, due, (HOUR, True), setup)
    decisions.put(0, later, (HOUR, True), setup)
    decisions.put(0, later, (5 * HOUR, True), setup)  # the last row of a key wins
    decisions.put(HOUR, open_window, (HOUR, True), setup)
    updates = Updates()
    decisions.expire(closed=HOUR, clock=2 * HOUR, updates=updates)
    assert _written(updates) == {due: None}
    assert decisions.get(0, due) is None
    assert decisions.get(0, later) is True and decisions.get(HOUR, open_window) is True
    updates = Updates()
    decisions.expire(closed=2 * HOUR, clock=6 * HOUR, updates=updates)
    assert _written(updates) == {later: None, open_window: None}
    assert len(decisions) == 0 and not decisions.by_expiry and not decisions._shared


def test_a_folded_copy_keeps_no_index_of_rows_tombstoned() -> None:
    """The aggregate stream folds rows and never expires: the record path's tombstones
    must free its index as well as its decisions."""
    decisions = Decisions()
    keys = [_key(0, hour * HOUR, f"s{i}".encode()) for hour in range(3) for i in range(50)]
    for key in keys:
        decisions.fold(key, codec.encode_decision(codec.decision_of(key)[2] + HOUR, True))
    assert len(decisions) == len(keys) and len(decisions._shared) == 3
    for key in keys:
        decisions.fold(key, None)
    assert len(decisions) == 0
    assert (decisions.by_window, decisions.by_expiry, decisions._shared) == ({}, {}, {})


def test_a_refusal_written_by_an_earlier_build_is_read_as_one() -> None:
    decisions = Decisions()
    key = _key(0, 0, b"s")
    decisions.fold(key, codec.encode_decision(HOUR, False))
    assert decisions.get(0, key) is False

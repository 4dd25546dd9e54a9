"""Red team: a lifetime cap turned on (or back on) under a live changelog counts nothing
released before it.

docs/ledger.md: "``lifetime_epsilon``: a cap over all windows, for as long as the
changelog lives", and "all released records of ``s`` together are (L, M delta)-DP".
Lifetime spending is written only while a lifetime cap is configured
(``core.charge``: ``if policy.lifetime_cap_units is not None``), so an operator who
adds ``lifetime_epsilon`` to a deployment that has run for a year restores every
subject at zero lifetime spending, and one who removes it for a while and puts it
back restores the spending as it was when removed. Each subject then releases up to
``M`` more records than the statement allows; nothing warns or refuses.
"""

from __future__ import annotations

from dataclasses import replace

from privstream.ledger import SubjectLedger

from tests.unit.ledger.test_charge import POLICY  # 2 records per window, 8 per lifetime


def _released(ledger: SubjectLedger, windows: range, log: list) -> int:  # type: ignore[type-arg]
    released = 0
    for w in windows:
        t = w * 1_000 + 10
        two = [b"s", b"s"]
        charge = ledger.charge(0, subjects=two, keys=two, timestamps_ms=[t, t], now_ms=t)
        released += int(charge.admitted.sum())
        log.extend(charge.updates)
    return released


def test_a_lifetime_cap_added_later_counts_the_records_released_before() -> None:
    log: list = []  # type: ignore[type-arg]
    before = _released(SubjectLedger(policy=replace(POLICY, lifetime_cap_units=None)),
                       range(0, 6), log)  # fmt: skip
    assert before == 12  # no lifetime cap yet: 2 per window
    after = SubjectLedger(policy=POLICY)  # lifetime_epsilon added: 8 records per lifetime
    after.restore(0, log)
    released_after = _released(after, range(6, 12), log)
    # the subject has released 12 records: a cap of 8 over its lifetime admits no more
    # (or the restore refuses to enforce a lifetime it cannot count)
    assert released_after == 0

"""Two red-team findings of session 11, fixed in the ledger itself (docs/ledger.md):

* two deployments (two ``kafka.group_id``) sharing one changelog each restored the other's
  spending: compaction keeps whichever wrote a subject's row last, so a deployment that had
  released 2 restored the other's 1 and released a third against a cap of 2. Each
  deployment now marks the partitions it charges (``codec``, record ``D``) and a restore
  meeting another's marker is refused;
* a lifetime cap set on a running deployment did not count what was released before it
  (lifetime spending is only written under a cap). A partition charged without a cap now
  refuses one (``codec``, record ``K``).

Expected outcomes come from the caps the policies state, never from the ledger's state.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from privstream.errors import ChangelogError
from privstream.ledger import SubjectLedger, codec

from tests.unit.ledger.test_charge import POLICY

Log = list[tuple[bytes, bytes | None]]


def charge(ledger: SubjectLedger, n: int, ts: int, log: Log) -> int:
    """Charge ``n`` records of subject ``alice`` stamped ``ts`` on partition 0, append the
    changelog records to ``log``; how many were admitted."""
    subjects = [b"alice"] * n
    done = ledger.charge(0, subjects=subjects, keys=subjects, timestamps_ms=[ts] * n, now_ms=ts)
    log.extend(done.updates)
    return int(done.admitted.sum())


def restored(deployment: str, log: Log, policy: object = POLICY) -> SubjectLedger:
    ledger = SubjectLedger(policy=policy, deployment=deployment)  # type: ignore[arg-type]
    ledger.restore(0, log)
    return ledger


def test_a_changelog_another_deployment_charged_is_refused() -> None:
    """The red team's interleaving: A releases 2 (its cap), B releases 1 later, so
    compaction keeps B's row. Without the marker, A restored 1 and released a third."""
    log: Log = []
    a, b = (SubjectLedger(policy=POLICY, deployment=name) for name in ("blue", "green"))
    assert charge(a, 2, 10, log) == 2
    assert charge(b, 1, 20, log) == 1
    with pytest.raises(ChangelogError, match=r"deployment \(kafka.group_id\) 'green'.*'blue'"):
        restored("blue", log)
    with pytest.raises(ChangelogError, match="'blue'"):
        restored("green", log)


def test_replicas_of_one_deployment_share_it() -> None:
    """Same group: the new owner restores the partition and admits nothing over the cap."""
    log: Log = []
    assert charge(SubjectLedger(policy=POLICY, deployment="blue"), 2, 10, log) == 2
    assert charge(restored("blue", log), 1, 20, log) == 0


def test_the_marker_is_written_once_per_restore() -> None:
    log: Log = []
    ledger = SubjectLedger(policy=POLICY, deployment="blue")
    charge(ledger, 1, 10, log)
    mark = (codec.deployment_key("blue"), codec.MARK)
    assert log.count(mark) == 1
    charge(ledger, 1, 20, log)
    assert log.count(mark) == 1
    again = restored("blue", log)
    charge(again, 1, 3_000, log)  # restored with the marker: not written again
    assert log.count(mark) == 1
    assert again.snapshot(0)[mark[0]] == codec.MARK


def test_a_tombstoned_marker_releases_the_changelog() -> None:
    """The documented way to retire a deployment whose changelog another takes over."""
    log: Log = []
    charge(SubjectLedger(policy=POLICY, deployment="old"), 2, 10, log)
    log.append((codec.deployment_key("old"), None))
    assert charge(restored("new", log), 1, 20, log) == 0  # its spending still counts


def test_a_lifetime_cap_set_later_is_refused() -> None:
    """12 records released without a cap (2 per window, 6 windows), then a cap of 8
    records: the changelog holds no lifetime spending, so the restore refuses it. Before
    the fix, 8 more were released."""
    uncapped = replace(POLICY, lifetime_cap_units=None, lifetime_epsilon=None)
    log: Log = []
    ledger = SubjectLedger(policy=uncapped, deployment="blue")
    released = sum(charge(ledger, 3, 1_000 * w, log) for w in range(6))
    assert released == 12  # 2 per window: the delta cap binds (test_charge.POLICY)
    assert not [key for key, _ in log if key[:2] == codec.LIFETIME]  # no row without a cap
    with pytest.raises(ChangelogError, match="lifetime_epsilon"):
        restored("blue", log, POLICY)  # lifetime_cap_units=25: 8 records of 3


def test_a_cap_removed_for_a_while_is_refused_when_set_again() -> None:
    """Releases made while the cap was off are in no lifetime row: the cap cannot return."""
    uncapped = replace(POLICY, lifetime_cap_units=None, lifetime_epsilon=None)
    log: Log = []
    assert charge(SubjectLedger(policy=POLICY, deployment="blue"), 2, 10, log) == 2
    assert charge(restored("blue", log, uncapped), 2, 1_010, log) == 2
    assert (codec.LIFETIME_KEPT, None) in log  # the first charge without a cap voids it
    with pytest.raises(ChangelogError, match="lifetime_epsilon"):
        restored("blue", log, POLICY)


def test_a_cap_from_the_start_restores_and_holds() -> None:
    log: Log = []
    released = 0
    for w in range(6):  # a restart before every window: the lifetime rows carry over
        released += charge(restored("blue", log, POLICY), 3, 1_000 * w, log)
    assert released == 8  # lifetime_cap_units=25: 8 records of 3
    assert log.count((codec.LIFETIME_KEPT, codec.MARK)) == 1  # restored with it: not again


def test_without_a_cap_lifetime_spending_never_refuses() -> None:
    uncapped = replace(POLICY, lifetime_cap_units=None, lifetime_epsilon=None)
    log: Log = []
    ledger = SubjectLedger(policy=uncapped, deployment="blue")
    assert sum(charge(ledger, 2, 1_000 * w, log) for w in range(40)) == 80

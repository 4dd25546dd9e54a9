"""Red team: two deployments over one raw topic share one ledger changelog by default.

docs/operations.md lists "two deployments over one raw topic (a coarse and a fine
output)" as an ordinary operation (the epsilons add). With ``privacy.ledger`` on
in both, each defaults to ``<input>-privstream-ledger`` (``changelog_topic``): the
same topic, the same keys (window, subject). Each worker keeps its own spending in
memory and writes it under those keys; compaction keeps the last write. After a
restart or a rebalance, deployment A restores B's (lower) spending for its subjects
and admits them again: A's per-subject cap no longer holds. Nothing refuses or
warns: the topic check passes (same partitions, compact, LogAppendTime).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from privstream.config import parse_config
from privstream.ledger import SubjectLedger
from privstream.worker.changelog import changelog_topic

from tests.unit.ledger.test_charge import POLICY  # 2 records per window (delta binds)


def deployment(group: str, output: str) -> Any:
    return parse_config(
        {
            "kafka": {"input_topic": "raw", "output_topic": output,
                      "dead_letter_topic": "dlq-" + output, "group_id": group},
            "privacy": {"epsilon": 10, "delta": 1e-6, "subject": "user",
                        "ledger": {"window": "1d", "epsilon": 10}},
            "fields": [{"name": "user", "kind": "drop"},
                       {"name": "x", "kind": "real", "bounds": [0, 1], "mechanism": "laplace",
                        "epsilon": 1}],
        }
    )  # fmt: skip


def test_two_deployments_over_one_raw_topic_get_changelogs_of_their_own() -> None:
    coarse, fine = deployment("coarse", "clean-coarse"), deployment("fine", "clean-fine")
    assert changelog_topic(coarse) != changelog_topic(fine)


def test_a_shared_changelog_restores_the_other_deployments_spending() -> None:
    """What the shared default leads to, at the ledger: A spends its cap, B writes the
    same key later with less, A restores the compacted changelog and releases again."""
    policy = replace(POLICY, lifetime_cap_units=None)
    log: list[Any] = []
    s = [b"s", b"s"]
    a, b = SubjectLedger(policy=policy), SubjectLedger(policy=policy)
    first = a.charge(0, subjects=s, keys=s, timestamps_ms=[10, 10], now_ms=10)
    log += first.updates
    log += b.charge(0, subjects=s[:1], keys=s[:1], timestamps_ms=[20], now_ms=20).updates
    restarted = SubjectLedger(policy=policy)
    restarted.restore(0, log)
    again = restarted.charge(0, subjects=s, keys=s, timestamps_ms=[30, 30], now_ms=30)
    assert int(first.admitted.sum()) + int(again.admitted.sum()) <= 2  # A's cap per window

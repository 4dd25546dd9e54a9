"""Red team 15b: findings against the ledger's aggregate wiring (i34-next at f33b1d6).

Each test fails on f33b1d6 and states the behaviour the fix should give. No randomness:
every input is fixed, so no test here can fail by chance (false-failure probability 0).
"""

from __future__ import annotations

import tracemalloc
from dataclasses import replace
from decimal import Decimal, localcontext

import numpy as np
import pytest
from aiokafka import ConsumerRecord
from privstream.aggregates import build_aggregates
from privstream.config import AppConfig
from privstream.config.aggregates import AggregateConfig
from privstream.config.ledger import DELTA_UNITS
from privstream.config.runtime import Runtime
from privstream.errors import ChangelogError
from privstream.ledger import codec
from privstream.ledger.aggregate_charges import AggregateCost
from privstream.ledger.decisions import Decisions
from privstream.ledger.updates import Updates
from privstream.worker.aggregate_ledger import LedgerGate

from tests.support import aggregate_stream as agg
from tests.support.configs import KAFKA
from tests.unit.ledger.test_aggregate_charges import DAY, HOUR, cost, policy
from tests.unit.ledger.test_joint_charge import OPEN, ledger_of

SECOND = 1_000
#: docs/deployment.md: "256 bytes a pair" of the privstream_ledger_subjects gauge
BYTES_PER_PAIR = 256


def _charge(ledger, subjects: list[bytes], times: np.ndarray, now: int = 3 * DAY):  # type: ignore[no-untyped-def]
    return ledger.charge(
        0,
        subjects=subjects,
        keys=subjects,
        timestamps_ms=times,
        now_ms=now,
        aggregate_ms=times.reshape(-1, 1),
    )


def test_a_subject_past_its_cap_grows_no_state_per_record() -> None:
    """F1 (MEDIUM): one key whose window budget is spent still adds a refused decision
    row (memory and a changelog record, ~250 bytes) for every aggregate window it sends a
    record in: with 1 s aggregate windows under a 1 d ledger, 86,400 rows a day per
    aggregate for ONE subject whose every record is suppressed. A refused decision need
    not be held: spending only grows within an open ledger window, so deciding it again
    refuses it again, and "no decision" already means left out (proof, step 8)."""
    p = replace(policy(DAY), **OPEN)
    every_second = replace(cost("s", SECOND, 0.5, 0.0), partial_id=b"1" * 32, grace_ms=0)
    ledger = ledger_of(p, (every_second,))
    records = 2_000
    times = 2 * DAY + np.arange(records, dtype=np.int64) * SECOND  # one per aggregate window
    charge = _charge(ledger, [b"hostile"] * records, times)
    assert charge.contributes is not None
    admitted = int(charge.contributes.sum())
    assert admitted < 5 and not charge.admitted[admitted + 5 :].any()  # the cap bit early
    held = len(ledger._partitions[0].decisions)
    rows = sum(1 for key, _ in charge.updates if key[:2] == codec.DECISION)
    assert (held, rows) == (admitted, admitted), (
        f"{held} decisions held and {rows} changelog rows for one subject with "
        f"{admitted} admitted contributions"
    )


def test_the_memory_formula_covers_the_decisions_held() -> None:
    """F1 (MEDIUM): docs/deployment.md sizes a worker's memory at 256 bytes per
    (subject, window) pair of ``privstream_ledger_subjects`` (``active_subject_windows``)
    and says to watch that gauge. Decisions are neither in the gauge nor in the formula:
    a well-behaved subject sending one record an hour under a 1 d ledger with one hourly
    aggregate (the docs' own example) holds 24 decisions, about 6 KB, 23x the budget."""
    p = replace(policy(DAY), **OPEN)
    hourly = replace(cost("h", HOUR, 0.05, 0.0), partial_id=b"2" * 32, grace_ms=HOUR)
    ledger = ledger_of(p, (hourly,))
    subjects = [f"user-{i:08d}".encode() for i in range(2_000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for hour in range(24):
            times = np.full(len(subjects), 2 * DAY + hour * HOUR + 5, dtype=np.int64)
            _charge(ledger, subjects, times)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    budget = BYTES_PER_PAIR * ledger.active_subject_windows()
    assert held <= budget, (
        f"{held} bytes held for {ledger.active_subject_windows()} pairs "
        f"({len(ledger._partitions[0].decisions)} decisions): the formula budgets {budget}"
    )


def test_an_aggregate_delta_cost_is_rounded_up_on_its_real_value() -> None:
    """F2 (LOW): proof step 2 says costs are rounded up exactly, but the delta charge
    ``(1 + e^eps) delta`` is computed in doubles and then rounded up: here the double
    is exactly 3814697265625 units (2**-18) while the real value of the config's doubles
    is 2.4e-4 units more, so the ledger charges less than the contribution costs. Fix:
    bound ``e^eps`` from above in exact arithmetic (e.g. ``math.nextafter(exp, inf)``
    and a Fraction product) before ``cost_units``."""
    eps, delta = 0.001, 1.9063949585755667e-06
    spec = AggregateConfig.model_validate(
        {"name": "odd", "query": "count", "epsilon": eps, "delta": delta,
         "window": {"size_seconds": 3600}, "output_topic": "o"}
    )  # fmt: skip
    charged = AggregateCost.of(spec).delta_cost_units
    with localcontext() as exact:
        exact.prec = 60
        real = (1 + Decimal(eps).exp()) * Decimal(delta) * DELTA_UNITS
    assert charged >= real, f"charged {charged} units for a cost of {real} units"


def test_a_malformed_decision_row_is_a_changelog_error() -> None:
    """F3 (LOW): the aggregate stream's ``LedgerGate._fold`` hands ``Decisions.fold`` the
    raw value of an ``A`` row without the length check ``Replay`` makes
    (``_VALUE_BYTES``): a short value raises ``struct.error``, not the ChangelogError
    that names the topic and the fix."""
    key = codec.decision_prefix((0, DAY), 0, b"3" * 32) + b"s"
    assert codec.kind_of(key) == b"A"
    with pytest.raises(ChangelogError):
        Decisions().fold(key, b"\x01")


class _CountingWindow(dict[bytes, tuple[int, bool]]):
    """A ledger window's decisions that count the rows a scan reads."""

    read = 0

    def items(self):  # type: ignore[no-untyped-def, override]
        for pair in super().items():
            _CountingWindow.read += 1
            yield pair


def test_a_charge_does_not_scan_every_decision_it_keeps() -> None:
    """F4 (MEDIUM): ``Decisions.expire`` runs at every ``charge`` (each partition of each
    batch) and reads every decision of every closed ledger window, including the ones
    kept for a long aggregate window: a 1 d aggregate under a 1 h ledger keeps each
    hour's decisions for up to a day. Measured on f33b1d6: a 1-record charge costs
    0.3 ms without aggregates, 11.6 ms with 220,000 decisions held and 29 ms with
    440,000 (about 60 ns a decision): a million subjects an hour stall the record path
    at ~1.3 s per partition per batch. Fix: index decisions by ``kept_until`` (a heap or
    a dict of buckets) so a charge reads only the ones it tombstones."""
    p = replace(policy(HOUR), grace_ms=0, max_future_ms=60_000)
    daily = replace(cost("d", DAY, 0.05, 0.0), partial_id=b"4" * 32, grace_ms=HOUR)
    ledger = ledger_of(p, (daily,))
    base, per_hour = 10 * DAY, 500
    for hour in range(22):
        subjects = [f"u{hour}-{i:04d}".encode() for i in range(per_hour)]
        times = np.full(per_hour, base + hour * HOUR + 5, dtype=np.int64)
        _charge(ledger, subjects, times, now=base + hour * HOUR + 10)
    decisions = ledger._partitions[0].decisions
    for start, window in list(decisions.by_window.items()):
        decisions.by_window[start] = _CountingWindow(window)
    held = len(decisions)
    _CountingWindow.read = 0
    now = base + 22 * HOUR + 10
    _charge(ledger, [b"x"], np.array([now - 5], dtype=np.int64), now=now)
    assert len(decisions) == held + 1  # nothing was due: the day's window is still open
    assert _CountingWindow.read <= 1, f"one charge read {_CountingWindow.read} of {held} decisions"


def test_a_record_whose_key_is_not_its_subject_enters_no_window() -> None:
    """F6 (MEDIUM, design): the record path never charges a record whose key is not its
    subject field (``subject_key_mismatch``, or no key: "always dead-lettered", and "whoever
    sets the key decides whose budget a record spends", docs/ledger.md), but the
    aggregate stream places records by the subject FIELD: ``LedgerGate.admits`` (and
    ``misplaced_records``) never look at the key. A writer keyed ``mallory`` (its own
    authenticated key) that writes ``"user": "victim"`` on the victim's partition puts its
    records into the victim's admitted contributions: its values reach aggregate releases
    while nothing is charged to ``mallory`` (one per subject field it names), and it takes
    the victim's first ``records_per_group`` places. Fix: give the gate the keys and admit
    only records whose key equals their subject (the ledger's own screen)."""

    window = {"size_seconds": 3600, "grace_seconds": 60}
    spec = {"name": "by_os", "query": "histogram", "field": "os", "epsilon": 0.5,
            "window": window, "output_topic": "o",
            "contribution": {"records_per_group": 2, "groups_per_subject": 2}}  # fmt: skip
    config = AppConfig.model_validate(
        {
            "kafka": {**KAFKA, "transactions": True},
            "privacy": {
                "epsilon": 10.0,
                "delta": 1e-6,
                "subject": "user",
                "ledger": {"window": "1d", "epsilon": 5.0},
            },
            "fields": agg.FIELDS,
            "aggregates": [spec],
        }
    )

    plans = build_aggregates(config)
    runtime = Runtime(noise_secret=b"k" * 32, replica_id="rt15b", credentials=None)
    gate = LedgerGate(config, config.needs_kafka("run"), runtime, plans)
    at = 2 * DAY + 5
    start = at - at % HOUR
    victim = codec.decision_prefix((2 * DAY, DAY), start, plans[0].partial_id.encode())
    decisions = Decisions()
    decisions.put(2 * DAY, victim + b"victim", (start + 2 * HOUR, True), Updates())
    gate._decisions[0] = decisions
    value = b'{"user": "victim", "os": "ios", "latency": 1}'
    records = [
        ConsumerRecord("raw", 0, o, at, 0, key, value, None, len(key or b""), len(value), [])
        for o, key in enumerate([b"victim", b"mallory", None])
    ]
    enters = [admits(0, start) for admits in gate.admits(0, records)]
    assert enters == [True, False, False], f"victim, mallory-keyed, keyless: {enters}"

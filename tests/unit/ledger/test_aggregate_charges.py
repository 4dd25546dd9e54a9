"""Aggregate contributions charged beside records: the decision, and an accounting check.

The accounting test recomputes every subject's spending from the raw stream and the
verdicts alone, with exact fractions of the configured doubles, and checks it against
the caps (docs/proofs/ledger-aggregates.md, step 2). Random streams are seeded: no test
here can fail by chance.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import replace
from fractions import Fraction

import pytest
from privstream.config.ledger import DELTA_UNITS, EPSILON_UNITS, cap_units, cost_units
from privstream.errors import MisuseError
from privstream.ledger.aggregate_charges import AggregateCost, JointLedger, Verdict
from privstream.ledger.core import SubjectLedger
from privstream.ledger.policy import LedgerPolicy

HOUR = 3_600_000
DAY = 24 * HOUR
RECORD_EPS, RECORD_DELTA = 1.5, 1e-7
CAP_EPS, CAP_DELTA, LIFETIME = 4.0, 1e-5, 11.0
#: (name, window, aggregate epsilon, delta): charged 2 eps and (1 + e^eps) delta
AGGREGATES = (
    ("hourly", HOUR, 0.5, 1e-7),
    ("daily", DAY, 0.25, 0.0),
    ("odd", 90 * 60_000, 0.1, 1e-6),
)


def policy(window_ms: int = DAY, lifetime: float | None = None) -> LedgerPolicy:
    return LedgerPolicy(
        window_ms=window_ms,
        grace_ms=0,
        max_future_ms=0,
        cost_units=cost_units(RECORD_EPS, EPSILON_UNITS),
        delta_cost_units=cost_units(RECORD_DELTA, DELTA_UNITS),
        cap_units=cap_units(CAP_EPS, EPSILON_UNITS),
        delta_cap_units=cap_units(CAP_DELTA, DELTA_UNITS),
        lifetime_cap_units=None if lifetime is None else cap_units(lifetime, EPSILON_UNITS),
        over_budget="drop",
        epsilon=CAP_EPS,
        delta=CAP_DELTA,
        lifetime_epsilon=lifetime,
        record_epsilon=RECORD_EPS,
        record_delta=RECORD_DELTA,
    )


def cost(name: str, window_ms: int, eps: float, delta: float) -> AggregateCost:
    charge_eps, charge_delta = 2.0 * eps, (1.0 + math.exp(eps)) * delta
    return AggregateCost(
        name=name,
        window_ms=window_ms,
        cost_units=cost_units(charge_eps, EPSILON_UNITS),
        delta_cost_units=cost_units(charge_delta, DELTA_UNITS),
        epsilon=charge_eps,
        delta=charge_delta,
    )


COSTS = tuple(cost(*a) for a in AGGREGATES)


def test_a_window_is_charged_once_and_records_get_the_rest() -> None:
    ledger = JointLedger(policy(), COSTS[:1])  # hourly, charged 1.0 per window
    # hour 0: the window (1.0) then the record (1.5); the second record 1.5 more: 4.0
    assert ledger.admit(b"s", 10, 10) == Verdict(released=True, contributes=(True,))
    assert ledger.admit(b"s", 20, 20) == Verdict(released=True, contributes=(True,))
    record_delta = cost_units(RECORD_DELTA, DELTA_UNITS)
    spent = [cap_units(CAP_EPS, EPSILON_UNITS), COSTS[0].delta_cost_units + 2 * record_delta]
    assert ledger.spent[(b"s", 0)] == spent
    # a third record fits neither: hour 0 still counts it, as its window was admitted
    assert ledger.admit(b"s", 30, 30) == Verdict(released=False, contributes=(True,))
    # hour 1 of the same day: its window would need 1.0 more than the cap allows
    assert ledger.admit(b"s", HOUR + 1, HOUR + 1) == Verdict(released=False, contributes=(False,))
    assert ledger.decided[(b"s", 0, HOUR, 0)] is False
    # another day is another ledger window: the budget is whole again
    assert ledger.admit(b"s", DAY, DAY) == Verdict(released=True, contributes=(True,))


def test_a_refusal_is_never_revisited_and_undecided_means_left_out() -> None:
    ledger = JointLedger(policy(), COSTS[:1])
    assert ledger.contributes(b"s", 0, 5, 5) is False  # no screened record yet: left out
    for t in (1, 2):
        ledger.admit(b"s", t, t)
    assert ledger.admit(b"s", HOUR, HOUR).contributes == (False,)
    # a record the screen refused (late, say) is never admitted, yet asks: still left out
    assert ledger.contributes(b"s", 0, HOUR + 5, HOUR + 5) is False
    assert ledger.contributes(b"s", 0, 7, 7) is True


def test_an_aggregate_window_across_two_ledger_windows_is_charged_in_each() -> None:
    ledger = JointLedger(policy(window_ms=HOUR), COSTS[1:2])  # daily windows, hourly ledger
    assert ledger.admit(b"s", 0, 0).contributes == (True,)
    assert ledger.admit(b"s", HOUR, HOUR).contributes == (True,)
    daily = COSTS[1].cost_units
    record = cost_units(RECORD_EPS, EPSILON_UNITS)
    assert ledger.spent[(b"s", 0)][0] == ledger.spent[(b"s", HOUR)][0] == daily + record
    assert {k for k, v in ledger.decided.items() if v} == {(b"s", 0, 0, 0), (b"s", 0, 0, HOUR)}


def test_the_charge_goes_to_the_ledger_window_of_the_ledger_s_time() -> None:
    """With ``privacy.ledger.time``, the ledger's time can fall in another day than the
    Kafka timestamp that places the record in an aggregate window."""
    ledger = JointLedger(policy(), COSTS[:1])
    assert ledger.admit(b"s", DAY + 5, DAY - 5).contributes == (True,)
    assert ledger.decided == {(b"s", 0, DAY - HOUR, DAY): True}
    assert (b"s", 0) not in ledger.spent
    assert ledger.spent[(b"s", DAY)][0] == COSTS[0].cost_units + cost_units(
        RECORD_EPS, EPSILON_UNITS
    )
    # the same aggregate window, read under day 0 of the ledger: a contribution of its own
    assert ledger.contributes(b"s", 0, DAY - 5, DAY - 5) is False


def test_each_aggregate_reads_its_own_time() -> None:
    """An aggregate with ``window.time`` places the record by that field: one time each."""
    ledger = JointLedger(policy(), COSTS[:2])
    verdict = ledger.admit(b"s", 5, [HOUR + 5, 5])
    assert verdict.contributes == (True, True)
    assert set(ledger.decided) == {(b"s", 0, HOUR, 0), (b"s", 1, 0, 0)}
    with pytest.raises(MisuseError, match="1 aggregate times for 2 aggregates"):
        ledger.admit(b"s", 5, [5])


def test_the_lifetime_cap_counts_windows_too() -> None:
    ledger = JointLedger(policy(lifetime=3.0), COSTS[:1])  # 3.0 ever: 1.0 + 1.5, then 0.5
    assert ledger.admit(b"s", 0, 0) == Verdict(released=True, contributes=(True,))
    assert ledger.admit(b"s", DAY, DAY) == Verdict(released=False, contributes=(False,))
    assert ledger.lifetime[b"s"] == COSTS[0].cost_units + cost_units(RECORD_EPS, EPSILON_UNITS)


def test_costs_come_from_the_config_and_windows_per_ledger_window_are_exact() -> None:
    from privstream.config.aggregates import AggregateConfig

    spec = AggregateConfig.model_validate(
        {"name": "hourly", "query": "count", "epsilon": 0.5, "delta": 1e-7,
         "window": {"size_seconds": 3600}, "output_topic": "o"}
    )  # fmt: skip
    assert AggregateCost.of(spec) == COSTS[0]
    with pytest.raises(MisuseError, match="no window"):
        AggregateCost.of(spec.model_copy(update={"window": None}))
    minutes = [1, 45, 60, 90, 24 * 60, 7 * 24 * 60]
    rng = random.Random(34)  # and small sizes: the enumeration runs a whole period
    pairs = [(a, b) for a in minutes for b in minutes]
    pairs += [(rng.randrange(1, 500), rng.randrange(1, 500)) for _ in range(200)]
    for size, ledger_window in pairs:
        expected = _meeting(size, ledger_window)
        assert cost("x", size, 0.1, 0).windows_per(ledger_window) == expected, (size, ledger_window)


def _meeting(size: int, ledger_window: int) -> int:
    """The most aggregate windows meeting one ledger window, by enumerating a full period."""
    period = size // math.gcd(size, ledger_window)  # ledger-window starts mod size repeat
    best = 0
    for k in range(period):
        start, end = k * ledger_window, (k + 1) * ledger_window - 1
        best = max(best, end // size - start // size + 1)
    return best


def _stream(seed: int, n: int = 4_000) -> list[tuple[bytes, int, bool]]:
    """(subject, timestamp, screened) in offset order: heavy and light subjects over three
    days; a tenth of the records fail the ledger's screen (late, future, misplaced)."""
    rng = random.Random(seed)
    subjects = [f"s{i}".encode() for i in range(40)]
    weights = [1 + 30 * (i % 5 == 0) for i in range(len(subjects))]
    out = []
    for _ in range(n):
        subject = rng.choices(subjects, weights)[0]
        out.append((subject, rng.randrange(0, 3 * DAY), rng.random() > 0.1))
    return out


@pytest.mark.parametrize("ledger_window", [HOUR, 6 * HOUR, DAY])
@pytest.mark.parametrize("lifetime", [None, LIFETIME])
@pytest.mark.parametrize("skew", [0, 2 * HOUR])
def test_no_subject_ever_spends_over_its_caps(
    ledger_window: int, lifetime: float | None, skew: int
) -> None:
    """Spending recomputed from the raw stream: each released record costs the record's
    (epsilon, delta); each (aggregate, aggregate window, ledger window) that one of the
    subject's records enters, wherever it was screened, costs (2 eps, (1 + e^eps) delta).
    ``skew``: the ledger's time (``privacy.ledger.time``) is up to that far from the
    Kafka timestamp that places the record in the aggregates' windows."""
    ledger = JointLedger(policy(ledger_window, lifetime), COSTS)
    rng = random.Random(ledger_window + skew)
    stream = [
        (s, t, max(0, t + rng.randint(-skew, skew)), ok)
        for s, t, ok in _stream(seed=ledger_window + (lifetime is not None))
    ]
    released = [ledger.admit(s, lt, t).released if ok else False for s, t, lt, ok in stream]
    eps: dict[tuple[bytes, int], Fraction] = {}
    delta: dict[tuple[bytes, int], Fraction] = {}
    entered: set[tuple[bytes, int, int, int]] = set()
    for (subject, t, lt, _), out in zip(stream, released, strict=True):
        where = (subject, lt // ledger_window)
        if out:
            eps[where] = eps.get(where, Fraction(0)) + Fraction(RECORD_EPS)
            delta[where] = delta.get(where, Fraction(0)) + Fraction(RECORD_DELTA)
        for index, (_, size, a_eps, a_delta) in enumerate(AGGREGATES):
            key = (subject, index, t // size, lt // ledger_window)
            if ledger.contributes(subject, index, lt, t) and key not in entered:
                entered.add(key)
                eps[where] = eps.get(where, Fraction(0)) + 2 * Fraction(a_eps)
                charged = (1 + Fraction(math.exp(a_eps))) * Fraction(a_delta)
                delta[where] = delta.get(where, Fraction(0)) + charged
    assert max(eps.values()) <= Fraction(CAP_EPS)
    assert max(delta.values()) <= Fraction(CAP_DELTA)
    if lifetime is not None:
        ever: dict[bytes, Fraction] = {}
        for (subject, _), spent in eps.items():
            ever[subject] = ever.get(subject, Fraction(0)) + spent
        assert max(ever.values()) <= Fraction(lifetime)
    # not vacuous: both kinds were charged, and records were refused; contributions are
    # refused too under a lifetime cap or where a ledger window meets several windows of
    # an aggregate (an hour without skew meets one hourly window, and the 90m windows
    # it meets are decided before its records could exhaust the cap)
    assert entered and any(released) and not all(released)
    refusals = any(v is False for v in ledger.decided.values())
    assert refusals == (ledger_window > HOUR or lifetime is not None or skew > 0)


def test_a_subject_s_decisions_depend_on_its_own_records_only() -> None:
    """Removing every other subject changes none of a subject's verdicts (step 1)."""
    stream = [(s, t) for s, t, ok in _stream(seed=7) if ok]
    together = JointLedger(policy(6 * HOUR), COSTS)
    verdicts = [(s, together.admit(s, t, t)) for s, t in stream]
    for subject in {s for s, _ in stream[:200]}:
        alone = JointLedger(policy(6 * HOUR), COSTS)
        own = [alone.admit(s, t, t) for s, t in stream if s == subject]
        assert own == [v for s, v in verdicts if s == subject]


def test_a_replay_from_the_committed_state_decides_the_same() -> None:
    """The state after a committed batch, restored, decides the next batch as before."""
    stream = [(s, t) for s, t, ok in _stream(seed=9) if ok]
    ledger = JointLedger(policy(), COSTS)
    for s, t in stream[:1_500]:
        ledger.admit(s, t, t)
    restored = copy.deepcopy(ledger)
    first = [ledger.admit(s, t, t) for s, t in stream[1_500:]]
    assert [restored.admit(s, t, t) for s, t in stream[1_500:]] == first


@pytest.mark.parametrize("lifetime", [None, LIFETIME])
def test_without_aggregates_it_decides_as_the_subject_ledger(lifetime: float | None) -> None:
    """The joint core extends today's ledger: with no aggregate, every record's verdict is
    ``SubjectLedger.charge``'s (records all screened: on time, keyed by their subject)."""
    base = replace(policy(6 * HOUR, lifetime), grace_ms=4 * DAY)  # nothing is late
    stream = _stream(seed=11, n=2_000)
    subjects = [s for s, _, _ in stream]
    stamps = [t for _, t, _ in stream]
    joint = JointLedger(base, ())
    expected = [joint.admit(s, t, t).released for s, t in zip(subjects, stamps, strict=True)]
    ledger = SubjectLedger(policy=base, deployment="g")
    for cut in range(0, len(stream), 500):  # in batches, as the worker charges
        part = slice(cut, cut + 500)
        charge = ledger.charge(
            0, subjects=subjects[part], keys=subjects[part], timestamps_ms=stamps[part],
            now_ms=3 * DAY,
        )  # fmt: skip
        assert charge.admitted.tolist() == expected[part]
    assert any(expected) and not all(expected)

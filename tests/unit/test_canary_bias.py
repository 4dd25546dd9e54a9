"""Canaries of the bounded-real mechanisms: spread over the bounds, judged on exact laws.

Their error depends on the input, so the canaries sit on a fixed grid over the
bounds and each statistic is compared with its exact expectation there
(``Mechanism.canary_law``): the mean ``|y - d|`` and the signed mean ``y - d``,
which a sampler that leans one way moves while the mean ``|y - d|`` hardly does.

Every band is 5 standard-error bounds ``sqrt(m2 / n)`` wide (``m2`` the law's
bound on ``mean E (y - d)^2``); with ``n`` >= 20,000 draws the normal tail gives a
false failure below 5.7e-7 per check (two-sided), fixed seeds aside.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.mechanisms.base import CanaryLaw
from privstream.mechanisms.unit_interval import UnitIntervalMechanism
from privstream.metrics import Metrics
from privstream.pipeline import RecordPlan
from privstream.pipeline.canary import Canaries
from privstream.testing import SeededSource
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.configs import config_dict

#: rounds of 32 canaries: 64,000 draws
ROUNDS = 2_000
#: how far a statistic may be from its expectation, in standard-error bounds
BAND = 5.0


def plan_for(mechanism: str, eps: float) -> RecordPlan:
    field = {"name": "v", "kind": "real", "bounds": [0, 100], "mechanism": mechanism}
    return build_plan(parse_config(config_dict([{**field, "epsilon": eps}], eps)))


def mechanism_of(plan: RecordPlan) -> UnitIntervalMechanism:
    mech = plan.handlers[0].mechanism
    assert isinstance(mech, UnitIntervalMechanism)
    return mech


def statistics(canaries: Canaries, seed: int) -> tuple[float, float, int]:
    """(mean |y - d|, mean y - d, draws) over ``ROUNDS`` rounds."""
    errors, signed = [], []
    source = SeededSource(seed)
    for _ in range(ROUNDS):
        drawn = canaries.draw(source)
        errors.append(drawn.errors["v"])
        signed.append(drawn.signed["v"])
    return float(np.mean(errors)), float(np.mean(signed)), ROUNDS * canaries.count


def band(law: CanaryLaw, n: int) -> float:
    assert law.second_moment is not None
    return BAND * math.sqrt(law.second_moment / n)


CASES = [
    ("piecewise", 4.0),
    ("hybrid", 1.0),
    ("duchi", 1.0),
    ("pm_sub", 3.0),
    ("three_outputs", 3.0),
]


@pytest.mark.parametrize(("mechanism", "eps"), CASES)
def test_correct_samplers_meet_the_exact_canary_law(mechanism: str, eps: float) -> None:
    plan = plan_for(mechanism, eps)
    canaries = Canaries(plan, count=32)
    (inputs,) = (c.inputs for c in canaries._canaries)
    np.testing.assert_array_equal(inputs, np.linspace(0.0, 100.0, 32))  # a grid, value-blind
    law = canaries.laws["v"]
    mech = mechanism_of(plan)
    assert law.bias == mech.bias_bound() and law.error < mech.expected_error  # not the worst
    error, signed, n = statistics(canaries, seed=12)
    assert abs(error - law.error) <= band(law, n)
    assert abs(signed) <= law.bias + band(law, n)


def leaning(mech: UnitIntervalMechanism, shift: float) -> Callable[..., Any]:
    """The mechanism's sampler with every report moved up by ``shift`` (``t`` units)."""
    correct = mech.sample
    return lambda t, words: correct(t, words) + shift


@pytest.mark.parametrize(("mechanism", "eps"), [("hybrid", 1.0), ("piecewise", 4.0)])
def test_a_sampler_that_leans_one_way_shows_in_the_signed_statistic_only(
    mechanism: str, eps: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every report moved up by 0.1 half-width: the signed mean moves by 5 field units,
    while the mean |y - d| at the former worst-case canaries stays inside the old
    80-120% band (measured: 100% for hybrid, 105% for piecewise).

    The band is at most 2.1 units (5 standard errors of at most 0.41), so missing the
    lean needs the signed mean 7 standard errors short of it: p < 1e-11 (normal tail).
    """
    plan = plan_for(mechanism, eps)
    mech = mechanism_of(plan)
    monkeypatch.setattr(mech, "sample", leaning(mech, 0.1))
    canaries = Canaries(plan, count=32)
    law = canaries.laws["v"]
    _, signed, n = statistics(canaries, seed=13)
    assert band(law, n) < 2.1
    assert signed > law.bias + band(law, n)  # PrivstreamCanaryBias fires
    # the old canaries, all at the worst t (both signs), judged against the worst case
    worst = np.clip(50.0 + 50.0 * mech.worst_t * np.array([1.0, -1.0] * 16), 0.0, 100.0)
    source = SeededSource(14)
    old = np.mean([np.abs(mech.release(worst, source) - worst) for _ in range(ROUNDS)])
    assert 0.8 < old / mech.expected_error < 1.2  # PrivstreamObservedErrorDrift would not


def test_the_exposition_carries_the_law_and_the_signed_counters() -> None:
    plan = plan_for("hybrid", 1.0)
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.describe_plan(plan, canaries=32, canary_interval_s=0, canary_source=SeededSource(5))
    for _ in range(ROUNDS):
        metrics.observe_fields({})
    text = generate_latest(registry).decode()
    found = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    law = Canaries(plan).laws["v"]
    assert found["privstream_field_canary_expected_error"] == law.error
    assert found["privstream_field_canary_error_second_moment"] == law.second_moment
    assert found["privstream_field_canary_bias_bound"] == law.bias
    n = found["privstream_field_canary_error_count"]
    over = found["privstream_field_canary_overshoot_total"]
    under = found["privstream_field_canary_undershoot_total"]
    assert n == ROUNDS * 32
    assert over + under == pytest.approx(found["privstream_field_canary_error_sum"], rel=1e-9)
    assert law.bias is not None and abs((over - under) / n) <= law.bias + band(law, int(n))


def test_fields_without_a_signed_law_export_no_signed_series() -> None:
    """Laplace keeps its input-blind law (the worst case) and has no signed series."""
    field = {"name": "v", "kind": "real", "bounds": [0, 100], "mechanism": "laplace"}
    plan = build_plan(parse_config(config_dict([{**field, "epsilon": 1.0}], 1.0)))
    canaries = Canaries(plan, count=8)
    mech = plan.handlers[0].mechanism
    assert mech is not None
    assert canaries.laws["v"] == CanaryLaw(mech.expected_error)
    assert canaries.draw(SeededSource(1)).signed == {}


def test_square_wave_canaries_are_judged_on_their_exact_law_not_the_worst_case() -> None:
    """Square Wave's canaries were already spread, but judged against the worst case:
    at epsilon 4 their exact mean is 71% of it, so a correct sampler fell below the
    80% band. 20,000 draws, 5 standard-error bounds from the law's second moment
    (which 2 mu^2, the rules' fallback, would understate: 442 against 184)."""
    field = {"name": "v", "kind": "real", "bounds": [0, 100], "target": "distribution"}
    plan = build_plan(parse_config(config_dict([{**field, "epsilon": 4.0}], 4.0)))
    canaries = Canaries(plan, count=32)
    mech = plan.handlers[0].mechanism
    assert mech is not None
    law = canaries.laws["v"]
    assert law.bias is None and law.error < 0.8 * mech.expected_error
    assert law.second_moment is not None and law.second_moment > 2 * law.error**2
    source = SeededSource(15)
    drawn = [canaries.draw(source) for _ in range(625)]
    assert all(d.signed == {} for d in drawn)
    error = float(np.mean([d.errors["v"] for d in drawn]))
    assert abs(error - law.error) <= band(law, 625 * 32)

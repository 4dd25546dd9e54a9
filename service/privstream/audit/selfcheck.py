r"""The self-check: the audit must be able to fail.

An audit that passes everything proves nothing. These scenarios run the
same procedure (same pipeline, same sample size, same per-audit alpha) on
mechanisms whose true epsilon is known, some calibrated, some deliberately
broken, and check that each comes out the way it must:

* ``laplace (calibrated)``: a real field on ``[0, 100]`` at eps 0.5, the
  library's mechanism. Must pass (a false failure has probability at most
  the per-audit alpha).
* ``laplace (half scale)``: the same field with the discrete Laplace noise
  at half its calibrated scale (``HalfScaleLaplace``): the realised epsilon
  is twice the claim (``eps0 = Delta / t`` doubles). Must fail.
* ``randomized response (keeps too often)``: three values at a claimed eps
  0.5 with the flip probability of eps 1.0 (``FixedFlipResponse``): the
  singleton ``{x}`` has ratio ``e^1``. Must fail.
* ``Example 4.5, one release``: the thesis's binary randomized response,
  ``p = 0.286``, claimed (0.1, 0.4): ``p >= (1 - delta)/(1 + e^eps) =
  0.28504``, so one release keeps the claim. Must pass.
* ``Example 4.5, released twice``: the same record sanitized twice with
  fresh noise, the two answers as one output ``(Y1, Y2)`` (output
  perturbation asked twice, or a duplicate in the sanitized topic,
  DESIGN §4). On ``A x A`` with ``A = {d}`` the thesis computes
  ``(1 - p)^2 = 0.5098`` against ``p^2 = 0.0817``, and ``0.5098 > e^0.1
  0.0817 + 0.4 = 0.4903``: the pair breaks (0.1, 0.4). The family is every
  subset of ``{0,1}^2`` (the whole algebra, Theorem 4.1); the report shows
  the observed frequencies next to the thesis's numbers. Must fail.
* ``laplace released twice, averaged``: the calibrated Laplace field, each
  record released twice and the mean published (the averaging attack). The
  mean of two ``Lap(b)`` draws has tails ``(1 + s/b) e^(-s/b)/2`` of its sum,
  so the ratio of the two inputs' laws grows towards ``e^(2 eps)`` in the
  tails (``e^0.59`` at the midpoint, ``e^0.72`` one diameter out). Must fail.

For the broken mechanisms whose law is known exactly (half-scale Laplace,
the over-keeping randomized response, the double release) the report gives
an upper bound on the chance that the audit wrongly passes them
(``stats.false_pass_probability``, minimised over the test sets drawn).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from privstream.audit.engine import Scenario
from privstream.audit.events import Event, HalfLine, InSet, Sample, Statistic, half_lines
from privstream.audit.scenarios import PlanAuditor
from privstream.audit.targets import FiniteTarget
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.mechanisms import LaplaceMechanism, RandomizedResponse
from privstream.mechanisms.discrete_laplace import DiscreteLaplace
from privstream.mechanisms.grid import to_grid
from privstream.mechanisms.randomized_response import DomainValue
from privstream.pipeline import RecordPlan
from privstream.pipeline.handlers import BooleanHandler, CategoricalHandler, RealHandler

_KAFKA = {"input_topic": "audit", "output_topic": "audit.out", "dead_letter_topic": "audit.dlq"}
#: Example 4.5 of the thesis: flip probability, claimed epsilon and delta
THESIS_P, THESIS_EPSILON, THESIS_DELTA = 0.286, 0.1, 0.4
LAPLACE_BOUNDS, LAPLACE_EPSILON = (0.0, 100.0), 0.5
RR_DOMAIN, RR_EPSILON = ("a", "b", "c"), 0.5


class HalfScaleLaplace(LaplaceMechanism):
    """Deliberately broken: the calibrated discrete Laplace at half its scale (eps doubles)."""

    def __init__(self, *, bounds: tuple[float, float], epsilon: float, delta: float = 0.0) -> None:
        super().__init__(bounds=bounds, epsilon=epsilon, delta=delta)
        if self.noise is not None:
            self.noise = DiscreteLaplace(self.noise.t / 2.0)


class FixedFlipResponse(RandomizedResponse):
    """Randomized response that claims (epsilon, delta) but flips with a given ``p``.

    With ``p`` below ``(1 - delta)/(m + e^eps)`` it keeps the true value too
    often and breaks its claim; Example 4.5's ``p = 0.286`` is above it.
    """

    def __init__(
        self, *, domain: Sequence[DomainValue], epsilon: float, delta: float, p: float
    ) -> None:
        super().__init__(domain=domain, epsilon=epsilon, delta=delta)
        self.p = p
        self.keep_probability = 1.0 - self.m * p


def rr_flip_probability(m: int, epsilon: float, delta: float) -> float:
    """``(1 - delta)/(m + e^eps)``: the calibrated flip probability (Example 4.10)."""
    return (1.0 - delta) / (m + math.exp(epsilon))


def _plan(field: dict[str, Any], epsilon: float, delta: float) -> RecordPlan:
    config = parse_config(
        {"kafka": _KAFKA, "privacy": {"epsilon": epsilon, "delta": delta}, "fields": [field]}
    )
    return build_plan(config)


def _with_handler(plan: RecordPlan, handler: Any) -> RecordPlan:
    return plan.with_handlers((handler,))


def _laplace_plan(broken: bool) -> RecordPlan:
    field = {
        "name": "x",
        "kind": "real",
        "mechanism": "laplace",
        "bounds": list(LAPLACE_BOUNDS),
        "epsilon": 0.5,
    }
    plan = _plan(field, 1.0, 0.0)
    if not broken:
        return plan
    mech = HalfScaleLaplace(bounds=LAPLACE_BOUNDS, epsilon=LAPLACE_EPSILON)
    return _with_handler(plan, RealHandler("x", mech, LAPLACE_BOUNDS))


def _laplace_exact(mech: LaplaceMechanism, inputs: Sequence[float]) -> Any:
    assert mech.noise is not None  # noqa: S101 -- [0, 100] has noise
    noise, g = mech.noise, mech.granularity
    centres = [int(to_grid(np.array([x]), g)[0]) for x in inputs]

    def exact(event: Event, i: int) -> float:
        assert isinstance(event, HalfLine)  # noqa: S101 -- this scenario's family
        below = noise.cdf(math.floor(event.threshold / g) - centres[i])
        return 1.0 - below if event.above else below

    return exact


def _rr_exact(target: FiniteTarget, keep: float, p: float) -> Any:
    def exact(event: Event, i: int) -> float:
        assert isinstance(event, InSet)  # noqa: S101 -- this scenario's family
        true = target.codes[i]
        return sum(keep if c == true else p for c in event.members)

    return exact


def _scenario(plan: RecordPlan) -> Scenario:
    return PlanAuditor(plan).field_scenario(plan.handlers[0].name)


def laplace_scenarios() -> list[Scenario]:
    ok = _scenario(_laplace_plan(broken=False))
    ok.name, ok.expect_violation = "laplace (calibrated)", False
    ok.about = "the library's Laplace on [0, 100] at eps 0.5: must pass"
    plan = _laplace_plan(broken=True)
    half = _scenario(plan)
    half.name, half.expect_violation = "laplace (half scale)", True
    half.about = "discrete Laplace at half the calibrated scale, realised eps 1.0: must fail"
    mech = plan.handlers[0].mechanism
    assert isinstance(mech, LaplaceMechanism)  # noqa: S101
    half.exact = _laplace_exact(mech, LAPLACE_BOUNDS)
    return [ok, half]


def rr_scenario() -> Scenario:
    field = {"name": "c", "kind": "categorical", "domain": list(RR_DOMAIN), "epsilon": RR_EPSILON}
    plan = _plan(field, 1.0, 0.0)
    m = len(RR_DOMAIN) - 1
    p = rr_flip_probability(m, 2.0 * RR_EPSILON, 0.0)
    rr = FixedFlipResponse(domain=RR_DOMAIN, epsilon=RR_EPSILON, delta=0.0, p=p)
    plan = _with_handler(plan, CategoricalHandler("c", rr, None))
    scenario = _scenario(plan)
    scenario.name, scenario.expect_violation = "randomized response (keeps too often)", True
    scenario.about = (
        f"3 values, claims eps {RR_EPSILON:g} but flips with p = {p:.4f} (that of eps "
        f"{2 * RR_EPSILON:g}): must fail"
    )
    target = PlanAuditor(plan).targets[0]
    assert isinstance(target, FiniteTarget)  # noqa: S101
    scenario.exact = _rr_exact(target, rr.keep_probability, p)
    return scenario


def _thesis_plan() -> tuple[RecordPlan, FixedFlipResponse]:
    field = {"name": "answer", "kind": "boolean", "epsilon": THESIS_EPSILON, "delta": THESIS_DELTA}
    plan = _plan(field, 1.0, THESIS_DELTA)
    rr = FixedFlipResponse(
        domain=(False, True), epsilon=THESIS_EPSILON, delta=THESIS_DELTA, p=THESIS_P
    )
    return _with_handler(plan, BooleanHandler("answer", rr)), rr


def _pair_label(codes: frozenset[int]) -> str:
    names = ("false", "true")
    shown = ", ".join(f"({names[c >> 1]},{names[c & 1]})" for c in sorted(codes))
    return f"(Y1,Y2) in {{{shown}}}"


def example_4_5_scenarios() -> list[Scenario]:
    plan, rr = _thesis_plan()
    single = _scenario(plan)
    single.name, single.expect_violation = "Example 4.5, one release", False
    single.about = (
        f"binary randomized response p = {THESIS_P}, claims ({THESIS_EPSILON:g}, "
        f"{THESIS_DELTA:g}) and keeps it: must pass"
    )
    target = PlanAuditor(plan).targets[0]
    assert isinstance(target, FiniteTarget)  # noqa: S101
    single.exact = _rr_exact(target, rr.keep_probability, rr.p)

    twice = _scenario(plan)
    one_draw = twice.draw

    def draw_pair(i: int, n: int) -> Sample:
        answers = np.asarray(one_draw(i, 2 * n).columns["answer"], dtype=np.int64)
        return Sample({"answer x2": 2 * answers[0::2] + answers[1::2]})

    subsets = [frozenset(c) for size in (1, 2, 3) for c in itertools.combinations(range(4), size)]
    events: list[Event] = [InSet("answer x2", s, _pair_label(s)) for s in subsets]

    def pair_exact(event: Event, i: int) -> float:
        assert isinstance(event, InSet)  # noqa: S101
        keep, p = rr.keep_probability, rr.p
        one = [keep if v == i else p for v in (0, 1)]
        return sum(one[c >> 1] * one[c & 1] for c in event.members)

    twice.name, twice.expect_violation = "Example 4.5, released twice", True
    twice.mechanism = "the same record sanitized twice, (Y1, Y2)"
    twice.draw = draw_pair
    twice.build_events = lambda pilot, samples: events
    twice.needs_pilot = False
    twice.input_labels = ["answer=false", "answer=true"]
    twice.exact = pair_exact
    twice.about = (
        "thesis: P[(Y1,Y2) in A x A] = (1-p)^2 = 0.5098 under d vs p^2 = 0.0817 under d', "
        "above e^0.1 0.0817 + 0.4 = 0.4903: must fail"
    )
    twice.show = [(_pair_label(frozenset({0})), 0, 1), (_pair_label(frozenset({3})), 1, 0)]
    return [single, twice]


def averaged_laplace_scenario() -> Scenario:
    scenario = _scenario(_laplace_plan(broken=False))
    one_draw = scenario.draw
    stat = Statistic("x mean of 2", "mean of two releases of x")

    def draw_mean(i: int, n: int) -> Sample:
        values = np.asarray(one_draw(i, 2 * n).columns["x"], dtype=np.float64)
        return Sample({"x mean of 2": (values[0::2] + values[1::2]) / 2.0})

    scenario.name, scenario.expect_violation = "laplace released twice, averaged", True
    scenario.mechanism = "mean of two calibrated Laplace releases"
    scenario.draw = draw_mean
    scenario.build_events = lambda pilot, samples: half_lines(stat, pilot or [])
    scenario.about = (
        f"claims eps {LAPLACE_EPSILON:g} for one release; the mean of two leaks up to "
        f"{2 * LAPLACE_EPSILON:g} in the tails: must fail"
    )
    return scenario


def self_check_scenarios() -> list[Scenario]:
    """Every self-check scenario, in report order."""
    return [
        *laplace_scenarios(),
        rr_scenario(),
        *example_4_5_scenarios(),
        averaged_laplace_scenario(),
    ]

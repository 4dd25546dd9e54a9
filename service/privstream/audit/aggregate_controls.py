r"""The self-check's controls of a config's aggregates: the same audit at half the noise.

``halve_noise`` is the aggregate's plan with every noisy total at half its
noise parameter: its realised epsilon is twice the claim, and the audit of
``privstream.audit.aggregates`` must report it failing. Counts, histograms
and sums on declared keys get such a control (``CONTROLLED``); means,
densities and ``select_groups`` do not (``UNCONTROLLED`` says why), and
their audits carry that note.
``AggregateScenarios`` gathers the audits of the chosen aggregates and their
controls for ``privstream.audit.run``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from privstream.aggregates import AggregatePlan, CellNoise, Partial, build_aggregates
from privstream.audit.aggregate_inputs import neighbours
from privstream.audit.aggregates import ReleaseSampler, moved, sampled_scenario
from privstream.audit.engine import Scenario
from privstream.audit.events import Event, HalfLine
from privstream.config import AppConfig
from privstream.errors import AuditError
from privstream.mechanisms.discrete_laplace import DiscreteLaplace

#: releases per input at most, by default (one ``release`` call per draw: ~0.2-1 ms)
DEFAULT_AGGREGATE_SAMPLES = 20_000
#: the queries whose half-noise control the self-check runs (and must see fail)
CONTROLLED = ("count", "histogram", "sum")
#: why the others have none (shown as a note of their audit)
UNCONTROLLED = {
    "mean": "no half-noise control: a mean's row is the ratio of two noisy totals, and "
    "halving both moves its law too little for the audit to see at feasible sample sizes",
    "density": "no half-noise control: Gaussian-process noise at a small delta reaches its "
    "epsilon only on sets of probability about delta, out of reach of the sample",
    "select_groups": "no half-noise control: a group only the unit reaches shows past the "
    "threshold with probability about delta, out of reach of the sample",
}


def half_noise_scenario(plan: AggregatePlan, noise: CellNoise | None = None) -> Scenario:
    """The self-check control of one aggregate: its audit with ``halve_noise``; must fail.

    With one moved cell (no projection) the law of every test set is known
    exactly, ``P[g (T + Z) <= s] = F_Z(floor(s / g) - T)``, so the report bounds
    the chance that the audit wrongly passes the control.
    """
    return _control(plan, noise)[0]


def _control(plan: AggregatePlan, noise: CellNoise | None) -> tuple[Scenario, ReleaseSampler]:
    broken = halve_noise(plan)
    scenario, sampler = sampled_scenario(broken, noise)
    scenario.name = f"aggregate {plan.name} (half noise)"
    scenario.expect_violation = True
    scenario.about = (
        f"{plan.name}'s {plan.query.kind} with every noise parameter halved, realised eps "
        f"{2 * plan.epsilon:g}: must fail"
    )
    with_unit, without = neighbours(plan)
    direction = moved(plan, with_unit, without)
    exactly_known = plan.threshold is None and plan.query.kind in CONTROLLED
    if exactly_known and sum(1 for u in direction if u) == 1:
        column = next(j for j, u in enumerate(direction) if u)
        scenario.exact = _exact(broken, (with_unit, without), column)
    return scenario, sampler


def _exact(
    plan: AggregatePlan, partials: Sequence[Partial], column: int
) -> Callable[[Event, int], float]:
    total = plan.query.totals[0]
    cell = plan.cells[column]  # declared cells: no ``select_groups``
    exact_totals = [(p.counts if total.part == "count" else p.sums).get(cell, 0) for p in partials]

    def exact(event: Event, i: int) -> float:
        assert isinstance(event, HalfLine)  # noqa: S101 -- one moved column: half-lines only
        below = total.noise.cdf(math.floor(event.threshold / total.step) - exact_totals[i])
        return 1.0 - below if event.above else below

    return exact


def halve_noise(plan: AggregatePlan) -> AggregatePlan:
    """Deliberately broken: every noisy total at half its noise parameter (eps doubles)."""
    totals = tuple(
        dataclasses.replace(t, noise=DiscreteLaplace(t.noise.t / 2.0)) for t in plan.query.totals
    )
    return dataclasses.replace(plan, query=dataclasses.replace(plan.query, totals=totals))


@dataclass
class AggregateScenarios:
    """The audits of the chosen aggregates and their half-noise controls (self-check)."""

    audits: list[Scenario]
    controls: list[Scenario]
    samplers: list[ReleaseSampler]

    @classmethod
    def of(
        cls,
        config: AppConfig,
        names: Sequence[str] | None,
        fields: Sequence[str] | None,
        samples: int,
    ) -> AggregateScenarios:
        """``names`` (default: every aggregate, none when ``fields`` are named)."""
        plans = {plan.name: plan for plan in build_aggregates(config)}
        if names is None:
            names = [] if fields is not None else list(plans)
        found = cls([], [], [])
        for name in dict.fromkeys(names):
            if name not in plans:
                raise AuditError(
                    f"--aggregate {name}: no such aggregate "
                    f"(aggregates: {', '.join(plans) or 'none'})"
                )
            found.add(plans[name], samples)
        return found

    def add(self, plan: AggregatePlan, samples: int) -> None:
        scenario, sampler = sampled_scenario(plan, None)
        pairs = [(scenario, sampler)]
        if plan.query.kind in CONTROLLED and plan.threshold is None:
            control, control_sampler = _control(plan, None)
            self.controls.append(control)
            pairs.append((control, control_sampler))
        else:
            kind = "select_groups" if plan.threshold is not None else plan.query.kind
            scenario.notes.append(UNCONTROLLED[kind])
        for each, each_sampler in pairs:
            each.max_samples = samples
            self.samplers.append(each_sampler)
        self.audits.append(scenario)

    @property
    def releases(self) -> int:
        return sum(sampler.releases for sampler in self.samplers)

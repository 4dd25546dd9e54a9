r"""The audits of a config's aggregates: releases of neighbouring windows through the real code.

For each aggregate, the neighbouring windows ``D`` and ``D'`` of
``privstream.audit.aggregate_inputs`` (one unit in, then out, at its bounds)
are released ``n`` times each by ``privstream.aggregates.release`` with the
file mode's noise (``FreshCells``: fresh kernel-seeded AES words per
release), exactly what ``sanitize --aggregates-output`` writes. One output is
the vector of the released rows' values, one column per row (per cell; a
density's per grid point); a row that is not released (``select_groups``)
reads ``-inf``. Claimed: the aggregate's epsilon and its realised delta, as
its rows state them; both directions of the inequality are checked.

Test sets (thresholds from a pilot, as for fields, ``privstream.audit.events``):

* the half-lines of every column a unit moves (the cells whose exact totals
  differ between ``D`` and ``D'``; every grid point for a density). For one
  moved cell (a histogram with ``groups_per_subject: 1``) the privacy loss
  of discrete Laplace noise is a monotone function of that column, so the
  extremal set is one of them (Neyman-Pearson);
* with more than one moved column, the half-lines of the projection on the
  direction ``D - D'`` (the exact difference of the totals; for a density,
  of the pilot's means).

The broken control (``halve_noise``, used by the self-check and the tests)
is the same plan with every noisy total at half its noise parameter: its
realised epsilon is twice the claim. Densities' Gaussian-process noise is
not halved there (its profile is audited, its half-noise control is not).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import orjson
from numpy.typing import NDArray

from privstream.aggregates import (
    AggregatePlan,
    CellNoise,
    FreshCells,
    Partial,
    build_aggregates,
    release,
)
from privstream.aggregates.read import cell_labels
from privstream.aggregates.release import selected_cells
from privstream.audit.aggregate_inputs import neighbours
from privstream.audit.engine import Scenario
from privstream.audit.events import Event, HalfLine, Sample, Statistic, half_lines
from privstream.audit.scenarios import all_pairs
from privstream.config import AppConfig
from privstream.errors import AuditError
from privstream.mechanisms.discrete_laplace import DiscreteLaplace

#: the sample column holding every draw's released values (one column per row)
VALUES = "values"
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
}


@dataclass(frozen=True)
class Along(Statistic):
    """The projection ``<y, u>`` of the released values on a direction (zeros left out)."""

    direction: tuple[float, ...] = ()

    def values(self, column: NDArray[np.float64]) -> NDArray[np.float64]:
        data = np.asarray(column, dtype=np.float64)
        used = [j for j, u in enumerate(self.direction) if u]
        weights = np.array([self.direction[j] for j in used], dtype=np.float64)
        projected: NDArray[np.float64] = data[:, used] @ weights
        return projected


class ReleaseSampler:
    """Draws releases of one aggregate over fixed partials; counts the releases drawn."""

    def __init__(self, plan: AggregatePlan, partials: Sequence[Partial], noise: CellNoise) -> None:
        self.plan = plan
        self.partials = tuple(partials)
        self.noise = noise
        self.labels = row_labels(plan, partials[0])
        self._index = {label: j for j, label in enumerate(self.labels)}
        self.releases = 0

    def draw(self, i: int, n: int) -> Sample:
        """``n`` releases of input ``i``: one row of values each (``-inf``: not released)."""
        out = np.full((n, len(self.labels)), -np.inf, dtype=np.float64)
        for k in range(n):
            for row in release(self.plan, self.partials[i], self.noise):
                out[k, self._index[orjson.dumps(row["group"])]] = float(row["value"])
        self.releases += n
        return Sample({VALUES: out})


def row_labels(plan: AggregatePlan, partial: Partial) -> list[bytes]:
    """The ``group`` of every row a release of ``partial`` can hold, in release order."""
    density = plan.query.density
    if density is not None and plan.spec.field is not None:
        return [orjson.dumps({plan.spec.field: x}) for x in density.grid]
    cells = plan.cells if plan.threshold is None else selected_cells(plan, partial)
    return [orjson.dumps(cell_labels(plan.reader.cell_fields, cell)) for cell in cells]


def moved(plan: AggregatePlan, with_unit: Partial, without: Partial) -> list[float]:
    """Per row label of ``with_unit``: how far the unit moves its exact total (0: not)."""
    if plan.query.density is not None:
        return [1.0] * len(row_labels(plan, with_unit))
    cells = plan.cells if plan.threshold is None else selected_cells(plan, with_unit)
    sums = plan.query.kind in ("sum", "mean")
    first, second = (with_unit.sums, without.sums) if sums else (with_unit.counts, without.counts)
    step = plan.query.total("sum").step if sums else 1.0
    count_moves = [with_unit.counts.get(c, 0) != without.counts.get(c, 0) for c in cells]
    out = []
    for cell, counted in zip(cells, count_moves, strict=True):
        difference = (first.get(cell, 0) - second.get(cell, 0)) * step
        out.append(difference if difference else float(counted))
    return out


EventBuilder = Callable[[Sequence[Sample] | None, int], list[Event]]


def _events(direction: list[float], from_pilot: bool) -> EventBuilder:
    """Half-lines of the moved columns and of the projection (``from_pilot``: along the
    difference of the pilot's means, a density's)."""

    def build(pilot: Sequence[Sample] | None, samples: int) -> list[Event]:
        chosen = pilot or []
        columns = [j for j, u in enumerate(direction) if u]
        events: list[Event] = []
        for j in columns:
            events += half_lines(Statistic(VALUES, f"row {j}", j), chosen)
        if len(columns) > 1:
            u = direction
            if from_pilot:
                means = [np.asarray(s.columns[VALUES]).mean(axis=0) for s in chosen]
                u = (means[0] - means[1]).tolist()
            events += half_lines(Along(VALUES, "projection on D - D'", None, tuple(u)), chosen)
        return events

    return build


def aggregate_scenario(plan: AggregatePlan, noise: CellNoise | None = None) -> Scenario:
    """The audit of one aggregate: ``D`` and ``D'`` released through ``release``."""
    return _scenario(plan, noise)[0]


def _scenario(plan: AggregatePlan, noise: CellNoise | None) -> tuple[Scenario, ReleaseSampler]:
    with_unit, without = neighbours(plan)
    sampler = ReleaseSampler(plan, (with_unit, without), noise or FreshCells())
    direction = moved(plan, with_unit, without)
    scenario = Scenario(
        name=f"aggregate {plan.name}",
        mechanism=f"{plan.query.kind} ({plan.unit_records} records per unit)",
        epsilon=plan.epsilon,
        delta=plan.delta,
        input_labels=["D (with the unit)", "D' (without it)"],
        pairs=all_pairs(2),
        draw=sampler.draw,
        build_events=_events(direction, from_pilot=plan.query.density is not None),
        needs_pilot=True,
        notes=[f"{len(sampler.labels)} rows per release, {sum(1 for u in direction if u)} moved"],
    )
    return scenario, sampler


def half_noise_scenario(plan: AggregatePlan, noise: CellNoise | None = None) -> Scenario:
    """The self-check control of one aggregate: its audit with ``halve_noise``; must fail.

    With one moved cell (no projection) the law of every test set is known
    exactly, ``P[g (T + Z) <= s] = F_Z(floor(s / g) - T)``, so the report bounds
    the chance that the audit wrongly passes the control.
    """
    return _control(plan, noise)[0]


def _control(plan: AggregatePlan, noise: CellNoise | None) -> tuple[Scenario, ReleaseSampler]:
    broken = halve_noise(plan)
    scenario, sampler = _scenario(broken, noise)
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
        scenario, sampler = _scenario(plan, None)
        pairs = [(scenario, sampler)]
        if plan.query.kind in CONTROLLED:
            control, control_sampler = _control(plan, None)
            self.controls.append(control)
            pairs.append((control, control_sampler))
        else:
            scenario.notes.append(UNCONTROLLED[plan.query.kind])
        for each, each_sampler in pairs:
            each.max_samples = samples
            self.samplers.append(each_sampler)
        self.audits.append(scenario)

    @property
    def releases(self) -> int:
        return sum(sampler.releases for sampler in self.samplers)

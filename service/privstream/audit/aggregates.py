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

The self-check's half-noise controls: ``privstream.audit.aggregate_controls``.
"""

from __future__ import annotations

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
    release,
)
from privstream.aggregates.read import cell_labels
from privstream.aggregates.release import selected_cells
from privstream.audit.aggregate_inputs import neighbours
from privstream.audit.engine import Scenario
from privstream.audit.events import Event, Sample, Statistic, half_lines
from privstream.audit.scenarios import all_pairs

#: the sample column holding every draw's released values (one column per row)
VALUES = "values"


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
        # no total moved (a one-cell count whose cap swaps the next record in): both
        # windows release one law, and every row's half-lines show it
        columns = [j for j, u in enumerate(direction) if u] or list(range(len(direction)))
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
    return sampled_scenario(plan, noise)[0]


def sampled_scenario(
    plan: AggregatePlan, noise: CellNoise | None
) -> tuple[Scenario, ReleaseSampler]:
    """The audit of one aggregate and the sampler behind its draws."""
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

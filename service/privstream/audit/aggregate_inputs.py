r"""Neighbouring windows of an aggregate: one unit's records in, then out, at its bounds.

The neighbours an aggregate's epsilon is about add or remove a *unit*
(docs/aggregates.md, "Units, neighbours and sensitivity"). The audit builds
two windows of raw records, ``D`` with the unit and ``D'`` without it, and
feeds each through the aggregate's real ``Accumulator`` (the bounding code
``sanitize --aggregates-output`` runs), so the partials differ exactly as
far as the code lets one unit move them:

* with ``privacy.subject``: the unit is a subject with ``records_per_group +
  1`` records in each of ``groups_per_subject + 1`` cells (one record and one
  cell over its bounds: the accumulator must drop them);
* with ``correlation``: the unit is one record of a full group (``max_group
  + 1`` records share its ``by`` value); removing it lets the group's next
  record in, in another cell where there is one (the swap the sensitivity
  pays for);
* otherwise: ``unit_records`` records (``privacy.group_size``) in one cell.

Values (sums, means, densities) sit at the bound farthest from the query's
centre: the largest move one record makes. Every other cell holds one
record of its own background subject (none of the unit's cells with
``select_groups``, where a group only the unit reaches is the worst case).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from privstream.aggregates import AggregatePlan, Partial
from privstream.aggregates.read import Cell
from privstream.config.paths import split_path

#: the label of the audited window
WINDOW = "audit"
#: keys invented for a group-by field without declared keys (``select_groups``)
FREE_KEYS = 4


def _put(record: dict[str, Any], name: str, value: object) -> None:
    """Set the value a field name's path leads to (``device.os``: nested objects)."""
    *outer, last = split_path(name)
    inner = record
    for key in outer:
        inner = inner.setdefault(key, {})
    inner[last] = value


def audit_cells(plan: AggregatePlan) -> list[Cell]:
    """The cells the audit's records go to: the declared ones, or invented keys."""
    if plan.cells:
        return list(plan.cells)
    keys = [
        sorted(allowed, key=str) if allowed else [f"audit-{i}" for i in range(FREE_KEYS)]
        for allowed in plan.reader.cell_keys
    ]
    return [tuple(cell) for cell in itertools.product(*keys)]


def worst_value(plan: AggregatePlan) -> float:
    """The bound farthest from the query's centre (the larger one on a tie)."""
    lo, hi = plan.query.bounds or (0.0, 0.0)
    centre = plan.query.center
    return lo if abs(lo - centre) > abs(hi - centre) else hi


def _record(plan: AggregatePlan, cell: Cell, unit: str) -> dict[str, Any]:
    reader = plan.reader
    record: dict[str, Any] = {}
    for name, key in zip(reader.cell_fields, cell, strict=True):
        _put(record, name, key)
    for identity in (reader.subject, reader.correlated_by):
        if identity is not None:
            _put(record, identity, unit)
    if reader.value_field is not None:
        _put(record, reader.value_field, worst_value(plan))
    return record


def unit_and_rest(
    plan: AggregatePlan, cells: Sequence[Cell]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The unit's records and the records of ``D`` that stay in ``D'`` (same order)."""
    bounds = plan.bounds
    if bounds.records_per_group is not None and bounds.groups_per_subject is not None:
        reach = cells[: bounds.groups_per_subject + 1]
        unit = [
            _record(plan, c, "audit-unit")
            for c in reach
            for _ in range(bounds.records_per_group + 1)
        ]
        return unit, []
    if bounds.max_group is not None:
        group = [_record(plan, cells[0], "audit-unit") for _ in range(bounds.max_group + 1)]
        group[-1] = _record(plan, cells[min(1, len(cells) - 1)], "audit-unit")
        return group[:1], group[1:]
    return [_record(plan, cells[0], "audit-unit") for _ in range(plan.unit_records)], []


def neighbours(plan: AggregatePlan) -> tuple[Partial, Partial]:
    """The partials of ``D`` (with the unit) and ``D'`` (without), through the accumulator."""
    cells = audit_cells(plan)
    unit, rest = unit_and_rest(plan, cells)
    reached = {tuple(_cell_of(plan, r)) for r in unit} if plan.threshold is not None else set()
    background = [
        _record(plan, cell, f"audit-background-{i}")
        for i, cell in enumerate(cells)
        if cell not in reached
    ]
    partials = []
    for records in ([*unit, *rest, *background], [*rest, *background]):
        accumulator = plan.accumulator(WINDOW)
        accumulator.add_all(records)
        partials.append(accumulator.partial())
    return partials[0], partials[1]


def _cell_of(plan: AggregatePlan, record: dict[str, Any]) -> Cell:
    cell = plan.reader.cell(record)
    return () if cell is None else cell

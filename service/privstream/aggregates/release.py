"""A window's partial to released rows: the noise added once per (aggregate, window, cell).

Every declared cell is released, empty or not (a missing row would tell
that a group is empty). Each total draws one noise integer per cell from
``CellNoise.source(release_id, window, cells)``: keyed sources make the rows
a pure function of (secret, partial, plan), so a replay gives identical
bytes. Rows: ``{aggregate, window, group, value, std_error, ci95, epsilon,
delta, bounds}``; the value and interval are post-processing of the noisy
totals (``Query.answer``). Proof: docs/proofs/aggregates.md.
"""

from __future__ import annotations

from typing import Any

import orjson

from privstream.aggregates.noise import CellNoise
from privstream.aggregates.partial import Partial
from privstream.aggregates.plan import AggregatePlan
from privstream.aggregates.read import cell_labels
from privstream.errors import MisuseError


def _check(plan: AggregatePlan, partial: Partial) -> None:
    if partial.aggregate != plan.name:
        raise MisuseError(f"a partial of {partial.aggregate!r} given to {plan.name!r}")
    declared = set(plan.cells)
    if not (set(partial.counts) | set(partial.sums)) <= declared:
        raise MisuseError(f"aggregate {plan.name!r}: a partial holds a cell it does not declare")


def noisy_totals(plan: AggregatePlan, partial: Partial, noise: CellNoise) -> dict[str, list[int]]:
    """Each total's noisy integers, one per declared cell, in ``plan.cells`` order."""
    _check(plan, partial)
    ids = plan.cell_ids()
    out: dict[str, list[int]] = {}
    for total in plan.query.totals:
        source = noise.source(plan.release_id(total.part), partial.window, ids)
        drawn = total.draw(source, len(ids))
        exact = partial.counts if total.part == "count" else partial.sums
        pairs = zip(plan.cells, drawn.tolist(), strict=True)
        out[total.part] = [exact.get(cell, 0) + z for cell, z in pairs]
    return out


def _bounds(plan: AggregatePlan) -> dict[str, Any]:
    spec = plan.spec
    out: dict[str, Any] = {"value": None if spec.bounds is None else list(spec.bounds)}
    if spec.contribution is not None:
        out.update(spec.contribution.model_dump())
    if spec.correlation is not None:
        out["max_group"] = spec.correlation.max_group
    out["unit_records"] = plan.unit_records
    return out


def release(plan: AggregatePlan, partial: Partial, noise: CellNoise) -> list[dict[str, Any]]:
    """The released rows of one (aggregate, window): one per declared cell."""
    noisy = noisy_totals(plan, partial, noise)
    query, bounds = plan.query, _bounds(plan)
    rows = []
    for position, cell in enumerate(plan.cells):
        value, std_error, (low, high) = query.answer({p: v[position] for p, v in noisy.items()})
        rows.append(
            {
                "aggregate": plan.name,
                "window": partial.window,
                "group": cell_labels(plan.reader.cell_fields, cell),
                "value": value,
                "std_error": std_error,
                "ci95": [low, high],
                "epsilon": query.epsilon,
                "delta": query.delta,
                "bounds": bounds,
            }
        )
    return rows


def encode_rows(rows: list[dict[str, Any]]) -> bytes:
    """JSON Lines, one row a line (deterministic: same rows, same bytes)."""
    return b"".join(orjson.dumps(row) + b"\n" for row in rows)

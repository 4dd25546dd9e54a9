"""A window's partial to released rows: the noise added once per (aggregate, window, cell).

Every declared cell is released, empty or not (a missing row would tell
that a group is empty). With ``select_groups`` the cells are those the
window's records reached, and a row is released only when its noisy count
passes the threshold (``privstream.aggregates.selection``). Each total draws
one noise integer per cell from ``CellNoise.source(release_id, window,
data, cells)`` (``data``: the partial's digest): keyed sources make the rows
a pure function of (secret, partial, plan), so a replay gives identical
bytes, and two releases of one window over different totals draw
independent noise. Rows: ``{aggregate, window, group,
value, std_error, ci95, epsilon, delta, bounds}``; the value and interval are
post-processing of the noisy totals (``Query.answer``). Proof:
docs/proofs/aggregates.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import orjson

from privstream.aggregates.noise import CellNoise
from privstream.aggregates.partial import Partial
from privstream.aggregates.plan import AggregatePlan
from privstream.aggregates.queries import Answer
from privstream.aggregates.read import Cell, cell_labels
from privstream.aggregates.totals import half_width
from privstream.errors import MisuseError

Row = dict[str, Any]


def _check(plan: AggregatePlan, partial: Partial) -> None:
    if partial.aggregate != plan.name:
        raise MisuseError(f"a partial of {partial.aggregate!r} given to {plan.name!r}")
    if plan.threshold is not None:  # the cells are the partial's own (``selected_cells``)
        return
    declared = set(plan.cells)
    density = plan.query.density
    sums = declared
    if density is not None:
        sums = {(*cell, j) for cell in plan.cells for j in range(len(density.grid))}
    if not (set(partial.counts) <= declared and set(partial.sums) <= sums):
        raise MisuseError(f"aggregate {plan.name!r}: a partial holds a cell it does not declare")


def noisy_totals(
    plan: AggregatePlan, partial: Partial, noise: CellNoise, cells: Sequence[Cell] | None = None
) -> dict[str, list[int]]:
    """Each total's noisy integers, one per cell of ``cells`` (default: every declared cell,
    in ``plan.cells`` order)."""
    _check(plan, partial)
    chosen = plan.cells if cells is None else cells
    ids = plan.cell_ids(chosen)
    out: dict[str, list[int]] = {}
    data = partial.digest()
    for total in plan.query.totals:
        source = noise.source(plan.release_id(total.part), partial.window, data, ids)
        drawn = total.draw(source, len(ids))
        exact = partial.counts if total.part == "count" else partial.sums
        pairs = zip(chosen, drawn.tolist(), strict=True)
        out[total.part] = [exact.get(cell, 0) + z for cell, z in pairs]
    return out


def selected_cells(plan: AggregatePlan, partial: Partial) -> list[Cell]:
    """``select_groups``: the cells the window's records reached, in canonical order."""
    seen = [cell for cell, count in partial.counts.items() if count > 0]
    ids = plan.cell_ids(seen)
    return [cell for _, cell in sorted(zip(ids, seen, strict=True))]


def _row(plan: AggregatePlan, window: str, group: dict[str, Any], answer: Answer) -> Row:
    value, std_error, (low, high) = answer
    return {
        "aggregate": plan.name,
        "window": window,
        "group": group,
        "value": value,
        "std_error": std_error,
        "ci95": [low, high],
        "epsilon": plan.epsilon,
        "delta": plan.delta,
        "bounds": plan.released_bounds,
    }


def release(plan: AggregatePlan, partial: Partial, noise: CellNoise) -> list[Row]:
    """The released rows of one (aggregate, window): one per declared cell (a density: one
    per grid point)."""
    cells = plan.cells if plan.threshold is None else selected_cells(plan, partial)
    noisy = noisy_totals(plan, partial, noise, cells)
    if plan.query.density is not None:
        return density_rows(plan, partial, noise, noisy["count"][0])
    rows = []
    for position, cell in enumerate(cells):
        values = {p: v[position] for p, v in noisy.items()}
        if plan.threshold is not None and values["count"] < plan.threshold:
            continue  # not selected: the noisy count decides, never the true one
        answer = plan.query.answer(values)
        rows.append(_row(plan, partial.window, cell_labels(plan.reader.cell_fields, cell), answer))
    return rows


def density_rows(plan: AggregatePlan, partial: Partial, noise: CellNoise, count: int) -> list[Row]:
    """A density's rows: ``S' / (max(N', 1) sqrt(2 pi) h)`` per grid point, kept in
    ``[0, 1 / (sqrt(2 pi) h)]``; the interval divides each kernel sum's 97.5% interval by
    the count's (bounds when the count's may reach below 1)."""
    density = plan.query.density
    if density is None or plan.spec.field is None:
        raise MisuseError(f"aggregate {plan.name!r} is no density")
    (cell,) = plan.cells
    totals = [[partial.sums.get((*cell, j), 0) for j in range(len(density.grid))]]
    source = noise.source(
        plan.release_id("density"), partial.window, partial.digest(), plan.cell_ids()
    )
    sums = density.noisy_sums(totals, source)[0].tolist()
    norm, top = density.normaliser, 1.0 / density.normaliser
    n = max(count, 1)
    k_count = half_width(plan.query.total("count").noise, 0.975)
    count_sd = plan.query.total("count").std_error
    spread, widths = density.spread().tolist(), density.half_widths().tolist()
    rows = []
    for j, x in enumerate(density.grid):
        value = min(max(sums[j] / (n * norm), 0.0), top)
        std_error = math.hypot(spread[j] / n, sums[j] * count_sd / (n * n)) / norm
        interval = (0.0, top)
        if count - k_count >= 1:
            ends = [
                s / (m * norm)
                for s in (sums[j] - widths[j], sums[j] + widths[j])
                for m in (count - k_count, count + k_count)
            ]
            interval = (min(max(min(ends), 0.0), top), min(max(max(ends), 0.0), top))
        answer = (value, std_error, interval)
        rows.append(_row(plan, partial.window, {plan.spec.field: x}, answer))
    return rows


def encode_rows(rows: list[Row]) -> bytes:
    """JSON Lines, one row a line (deterministic: same rows, same bytes)."""
    return b"".join(orjson.dumps(row) + b"\n" for row in rows)

"""``privstream explain``'s aggregates: each one's sensitivities, noise, error and the totals."""

from __future__ import annotations

import math
from typing import Any

from privstream.aggregates import AggregatePlan, build_aggregates
from privstream.config import AppConfig
from privstream.config.aggregates import aggregate_charge


def _unit(config: AppConfig, plan: AggregatePlan) -> str:
    if config.privacy.subject is not None:
        return f"subject ({config.privacy.subject})"
    if plan.unit_records > 1:
        return f"individual (up to {plan.unit_records} records)"
    return "record"


def aggregates_data(config: AppConfig) -> dict[str, Any] | None:
    """Each aggregate's query parts and the totals, or None without aggregates."""
    if not config.aggregates:
        return None
    plans = build_aggregates(config)
    entries = []
    for plan in plans:
        query = plan.query
        entries.append(
            {
                "name": plan.name,
                "query": query.kind,
                "epsilon": plan.epsilon,
                "delta": plan.delta,
                "threshold": plan.threshold,
                "unit": _unit(config, plan),
                "unit_records": plan.unit_records,
                "cells": len(plan.cells),
                "correlation": None
                if plan.spec.correlation is None
                else plan.spec.correlation.model_dump(),
                "parts": query.parts(),
            }
        )
    charge_eps, charge_delta = aggregate_charge(config.aggregates)
    return {
        "aggregates": entries,
        "per_unit_epsilon": math.fsum(plan.epsilon for plan in plans),
        "per_unit_delta": math.fsum(plan.delta for plan in plans),
        "record_budget_epsilon": charge_eps,
        "record_budget_delta": charge_delta,
    }


def _num(value: float) -> str:
    return f"{value:.6g}"


def aggregates_lines(data: dict[str, Any] | None) -> tuple[list[str], list[str]]:
    """The aggregates' table and the notes on what they cost, for the explain table."""
    if data is None:
        return [], []
    header = (
        "aggregate",
        "query",
        "epsilon",
        "delta",
        "cells",
        "sens",
        "indep",
        "naive",
        "scale",
        "E[error]",
        "ci95 +-",
    )
    rows = [header]
    for entry in data["aggregates"]:
        for part in entry["parts"]:
            name = entry["query"]
            if len(entry["parts"]) > 1:
                name += f".{part['part']}"
            rows.append(
                (
                    entry["name"],
                    name,
                    _num(part["epsilon"]),
                    _num(part["delta"]),
                    str(part["cells"]),
                    _num(part["sensitivity"]),
                    _num(part["sensitivity_independent"]),
                    _num(part["sensitivity_naive"]),
                    _num(part["scale"]),
                    _num(part["expected_error"]),
                    _num(part["ci95_half_width"]),
                )
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    units = sorted({entry["unit"] for entry in data["aggregates"]})
    notes = [
        f"{entry['name']}: groups selected from the data, released when their noisy count "
        f"is at least {entry['threshold']} (delta={_num(entry['delta'])})"
        for entry in data["aggregates"]
        if entry["threshold"] is not None
    ]
    notes += [
        f"aggregates per {' / '.join(units)} per window (added or removed): "
        f"epsilon={_num(data['per_unit_epsilon'])} delta={_num(data['per_unit_delta'])}",
        "aggregates against the per-record budget (a changed record is a removal and an "
        f"addition: 2 eps, (1 + e^eps) delta each): epsilon={_num(data['record_budget_epsilon'])}"
        f" delta={_num(data['record_budget_delta'])}",
    ]
    return lines, notes

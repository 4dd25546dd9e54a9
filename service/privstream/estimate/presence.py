r"""Estimates over the present values of an imputed field with a presence bit.

A field with ``on_missing: impute`` releases every record's value noised,
an absent or null one as the imputed value ``c``. With ``presence_epsilon``
it also releases ``<name>_present`` by randomized response, whose
estimated share of true is ``pi`` (the share of records holding the field).
Over the n released records, the field's estimate ``f`` (a mean, or the
share of one category) is

    f = pi g + (1 - pi) c,   so   g = c + (f - c) / pi

where ``g`` is the same quantity over the present values only (for a share,
``c`` is 1 for the imputed category and 0 for the others). ``f`` and ``pi``
are estimated from independent noise (two releases with their own keys),
each unbiased given the records, so the delta method gives

    Var(g) ~ Var(f) / pi^2 + (f - c)^2 Var(pi) / pi^4

(docs/estimating-and-auditing.md). The plug-in ratio is consistent, not
unbiased: its relative bias is of order ``Var(pi) / pi^2``, small beside the
stderr once ``pi`` is estimated to a few percent. No estimate where ``pi``
is not clearly positive (its interval reaches 0).
"""

from __future__ import annotations

import math
from typing import Any

from privstream.config.missing import presence_name
from privstream.estimate.accumulators import Options, interval
from privstream.pipeline.missing import MissingHandler
from privstream.pipeline.plan import RecordPlan


def present_estimate(
    f: float, f_stderr: float, c: float, pi: float, pi_stderr: float, z: float
) -> dict[str, Any]:
    """``g`` of the module docstring, its delta-method stderr and interval."""
    if not (math.isfinite(pi) and pi - z * pi_stderr > 0):
        return {"estimate": None, "stderr": None, "ci": [None, None]}
    g = c + (f - c) / pi
    stderr = math.sqrt(f_stderr**2 / pi**2 + (f - c) ** 2 * pi_stderr**2 / pi**4)
    return {"estimate": g, "stderr": stderr, "ci": interval(g, stderr, z)}


def _true_share(entry: dict[str, Any]) -> tuple[float, float] | None:
    for row in entry.get("frequencies", []):
        if row["value"] is True:
            return float(row["estimate"]), float(row["stderr"])
    return None


def add_present_estimates(
    plan: RecordPlan, entries: list[dict[str, Any]], options: Options
) -> None:
    """Add ``present`` to the entry of every imputed field whose presence bit is estimated."""
    by_name = {entry["name"]: entry for entry in entries}
    for planned in plan.fields:
        handler = planned.handler
        entry = by_name.get(planned.name)
        bit = by_name.get(presence_name(planned.name))
        if not isinstance(handler, MissingHandler) or entry is None or bit is None:
            continue
        share = _true_share(bit)
        if share is None:
            continue
        pi, pi_stderr = share
        present: dict[str, Any] = {"share": {"estimate": pi, "stderr": pi_stderr}}
        present["share"]["ci"] = interval(pi, pi_stderr, options.z)
        imputed = handler.stand_in
        # a mean is over parsed values: a timestamp's unit indices, not its ISO text
        counted = handler.parsed_stand_in
        if "mean" in entry and isinstance(counted, int | float):
            mean = entry["mean"]
            f, f_stderr, c = mean["estimate"], mean["stderr"], float(counted)
            present["mean"] = present_estimate(f, f_stderr, c, pi, pi_stderr, options.z)
        rows = entry.get("frequencies")
        if rows and "value" in rows[0]:
            present["frequencies"] = [
                {
                    "value": row["value"],
                    **present_estimate(
                        row["estimate"],
                        row["stderr"],
                        float(row["value"] == imputed),
                        pi,
                        pi_stderr,
                        options.z,
                    ),
                }
                for row in rows
            ]
        entry["present"] = present
        mean = present.get("mean", {}).get("estimate")
        told = "" if mean is None else f"mean {mean:.6g} +- {present['mean']['stderr']:.2g}, "
        entry["notes"].append(
            f"present: {told}estimates over the records holding {planned.name} (JSON: "
            f"present), debiased with {bit['name']} (share present {pi:.4g} +- {pi_stderr:.2g})"
        )

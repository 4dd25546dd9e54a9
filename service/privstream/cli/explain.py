"""``privstream explain``: what each field releases and what it guarantees."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from privstream.config import AppConfig, FieldConfig, Guarantee
from privstream.config.fields import FORGEABLE, CategoricalField, IntegerField, RealField
from privstream.config.missing import presence_name
from privstream.errors import RegistryError
from privstream.kinds import registration_for
from privstream.kinds.auto import WARN_RATIO, auto_choice
from privstream.kinds.auto_real import explain_auto_real
from privstream.mechanisms import Mechanism
from privstream.pipeline import RecordPlan
from privstream.pipeline.plan import MemoPlan, PlannedField


def explain_data(config: AppConfig, plan: RecordPlan) -> dict[str, Any]:
    """The machine-readable explanation, read from the plan's mechanism objects."""
    # here, not at the top: run and sanitize import this module for declared_warnings only
    from privstream.cli.explain_aggregates import aggregates_data
    from privstream.ledger.guarantee import ledger_guarantee

    by_name = {f.name: f for f in plan.fields}
    fields: list[dict[str, Any]] = []
    for spec in config.fields:
        planned = by_name.get(spec.name)
        describe = registration_for(planned).explain if planned is not None else None
        entry: dict[str, Any] = {"name": spec.name, "kind": spec.kind, "mechanism": None}
        if planned is not None and planned.handler.mechanism is not None:
            entry.update(_noised_entry(plan, planned))
            entry.update(_memo_entry(planned.memo))
            entry.update(_missing_entry(spec))
            share = plan.budget.fields.get(spec.name)
            entry.update(_auto_entry(spec, share, planned.handler.mechanism))
            entry["optimality"] = _optimality(entry)
        else:
            entry.update(
                epsilon=0.0, delta=0.0, params={}, expected_error=None, gamma_lower_bound=None
            )
            if planned is not None and describe is not None:  # a public transform says what
                entry.update(describe(planned.handler))
            if hasattr(spec, "on_missing"):  # a timestamp without epsilon
                entry.update(_missing_entry(spec))
        fields.append(entry)
        presence = by_name.get(presence_name(spec.name))
        if getattr(spec, "presence_epsilon", None) is not None and presence is not None:
            bit: dict[str, Any] = {
                "name": presence.name,
                "kind": presence.kind,
                "presence_of": spec.name,
            }
            bit.update(_noised_entry(plan, presence))
            bit["optimality"] = _optimality(bit)
            fields.append(bit)
    budget = plan.budget
    k = budget.group_size
    return {
        "record": {
            "epsilon": plan.epsilon,
            "delta": plan.delta,
            "budget_epsilon": config.privacy.epsilon,
            "budget_delta": config.privacy.delta,
            "group_size": k,
            "group_epsilon": budget.group.epsilon,
            "group_delta": budget.group.delta,
            "level": "event (one record)" if k == 1 else f"individual (up to {k} records)",
        },
        "config_sha256": plan.config_sha256,
        "fields": fields,
        "metrics": _metrics_data(config, plan),
        "ledger": ledger_guarantee(config, plan),
        "aggregates": aggregates_data(config),
    }


def _noised_entry(plan: RecordPlan, planned: PlannedField) -> dict[str, Any]:
    """Mechanism, epsilon, delta, declared share and the kind's own description."""
    describe = registration_for(planned).explain
    declared = plan.budget.declared[planned.name]
    if describe is None:  # every noised registration has one (``_NOISED_PARTS``)
        raise RegistryError(f"field {planned.name!r}: its kind has no explain")
    described = describe(planned.handler)
    # key order as before the registry: mechanism, epsilon, delta, declared_*, ...
    entry = {key: described.pop(key) for key in ("mechanism", "epsilon", "delta")}
    entry.update(declared_epsilon=declared.epsilon, declared_delta=declared.delta)
    entry.update(described)
    return entry


def _metrics_data(config: AppConfig, plan: RecordPlan) -> dict[str, Any]:
    """What /metrics costs: nothing, unless noisy clamped counts are on (their epsilon adds)."""
    clamped = config.metrics.clamped_counts
    entry: dict[str, Any] = {
        "canaries_per_field_and_batch": config.metrics.canaries,
        "dead_letter_reasons": config.metrics.dead_letter_reasons,
        "clamped_counts": None,
        "epsilon": 0.0,
    }
    if clamped is not None:
        # here, not at the top: it imports prometheus_client, which sanitize never needs
        from privstream.clamped_counts import clamping_fields

        entry.update(
            clamped_counts={
                "epsilon": clamped.epsilon,
                "window_seconds": clamped.window_seconds,
                "fields": sorted(clamping_fields(plan)),
                "group_epsilon": plan.budget.group_size * clamped.epsilon,
            },
            epsilon=clamped.epsilon,
        )
    entry["record_epsilon_with_metrics"] = plan.epsilon + entry["epsilon"]
    return entry


def _auto_entry(
    spec: FieldConfig, share: Guarantee | None, planned: Mechanism | None
) -> dict[str, Any]:
    """A field's ``auto`` choice, each candidate's variance, and any warning.

    ``planned``: the field's mechanism in the plan (a real field's candidates reuse it).
    """
    if isinstance(spec, RealField) and spec.target == "distribution":
        return {}  # square_wave alone serves it: the mean mechanisms are no alternative
    if isinstance(spec, RealField | IntegerField) and share is not None:
        return explain_auto_real(spec, share, WARN_RATIO, planned)
    if not isinstance(spec, CategoricalField) or share is None:
        return {}
    choice = auto_choice(spec, share)
    # exponential estimates no frequencies: it is not compared
    declared = choice.variances.get(spec.mechanism)
    best = choice.variances.get(choice.mechanism)
    warning = None
    if declared is not None and best is not None and declared > WARN_RATIO * best:
        warning = (
            f"{spec.name}: {spec.mechanism} has {declared / best:.3g}x the frequency-vector "
            f"variance of {choice.mechanism} (what mechanism: auto picks); drop mechanism: "
            "to use it"
        )
    return {
        "auto": {
            "declared": spec.mechanism,
            "chosen": choice.mechanism,
            "variances_n": choice.n,
            "candidate_variances": choice.variances,
            "restricted": choice.restricted,
        },
        "auto_warning": warning,
    }


#: what each optimality number is for (one line under the table)
OPTIMALITY_NOTE = (
    "optimality: E[error]/gamma LB is the per-record view (1 = no eps-DP mechanism errs less on "
    "one released record: what matters when single records are used); variance vs auto is the "
    "aggregate view (frequencies estimated over many records, 1 = auto's choice): they can "
    "disagree, e.g. randomized response at k = 1,000 is 1 per record and ~90x in aggregate"
)


def _optimality(entry: dict[str, Any]) -> dict[str, Any]:
    """Per-record error over its lower bound, and the estimator variance over auto's choice."""
    error, gamma = entry.get("expected_error"), entry.get("gamma_lower_bound")
    per_record = error / gamma if error is not None and gamma else None
    auto = entry.get("auto") or {}
    variances = auto.get("candidate_variances", {})
    own, chosen = variances.get(entry["mechanism"]), variances.get(auto.get("chosen"))
    return {
        "error_to_gamma": per_record,
        "variance_to_auto": own / chosen if own is not None and chosen else None,
        "auto_choice": auto.get("chosen"),
        "variance_n": auto.get("variances_n"),
        "variance_kind": auto.get("criterion", "frequency-vector variance"),
    }


def _optimality_lines(fields: list[dict[str, Any]]) -> list[str]:
    lines = []
    for f in fields:
        o = f.get("optimality")
        if o is None or (o["error_to_gamma"] is None and o["variance_to_auto"] is None):
            continue
        text = f"optimality: {f['name']}: E[error]/gamma LB {_num(o['error_to_gamma'])}"
        if o["variance_to_auto"] is not None:
            text += (
                f"; {o['variance_kind']} at n={o['variance_n']} vs auto "
                f"({o['auto_choice']}) {_num(o['variance_to_auto'])}"
            )
        lines.append(text)
    return [*lines, OPTIMALITY_NOTE] if lines else []


def declared_warnings(config: AppConfig, plan: RecordPlan) -> list[str]:
    """One line per field whose declared mechanism loses to ``auto`` by over ``WARN_RATIO``.

    What ``explain`` warns about, for the start-up of ``run`` and ``sanitize``.
    """
    planned = {f.name: f.handler.mechanism for f in plan.fields}
    warnings = []
    for spec in config.fields:
        share = plan.budget.fields.get(spec.name)
        warning = _auto_entry(spec, share, planned.get(spec.name)).get("auto_warning")
        if warning:
            warnings.append(str(warning))
    return warnings


def _auto_lines(fields: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for f in fields:
        auto = f.get("auto")
        if auto is None:
            continue
        if auto["declared"] == "auto":
            variances = ", ".join(
                f"{name} {_num(v)}" for name, v in auto["candidate_variances"].items()
            )
            why = f"; {auto['restricted']}" if auto["restricted"] else ""
            if "candidate_regrets" in auto:  # real fields: the criterion auto minimises
                regrets = ", ".join(
                    f"{name} {v:.3g}" for name, v in auto["candidate_regrets"].items()
                )
                rule = auto.get("rule", "least regret over every data spread")
                why += f"; picked by the {rule}; regrets {regrets}"
            lines.append(
                f"auto: {f['name']} uses {auto['chosen']} "
                f"({auto.get('criterion', 'frequency-vector variance')} at "
                f"n={auto['variances_n']}: {variances or '-'}{why})"
            )
        if f.get("auto_warning"):
            lines.append(f"WARNING: {f['auto_warning']}")
    return lines


def _memo_entry(memo: MemoPlan | None) -> dict[str, Any]:
    """Where a memoized field's identity comes from, and whether writers can forge it."""
    if memo is None:
        return {"memoize_by": None, "memo_identity": None, "memo_forgeable": False}
    if memo.field is None:
        return {"memoize_by": None, "memo_identity": "message_key", "memo_forgeable": False}
    return {"memoize_by": memo.field, "memo_identity": "field", "memo_forgeable": True}


def _missing_entry(spec: Any) -> dict[str, Any]:
    """How an absent or null value is released (``on_missing``)."""
    mode = getattr(spec, "on_missing", "dead_letter")
    entry: dict[str, Any] = {"on_missing": mode}
    if mode == "impute":
        entry["impute"] = spec.impute
    if mode == "null":
        entry["presence_public"] = True
    return entry


def _missing_lines(fields: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    bits = {f["presence_of"]: f for f in fields if "presence_of" in f}
    for f in fields:
        if f.get("on_missing") == "impute":
            bit = bits.get(f["name"])
            shown = (
                "its value never shows whether it was present"
                if bit is None
                else f"whether it was present is released only by {bit['name']} "
                f"(randomized response, epsilon={_num(bit['epsilon'])})"
            )
            lines.append(
                f"missing: {f['name']} absent or null is noised as "
                f"{json.dumps(f['impute'])}; {shown}"
            )
        elif f.get("on_missing") == "null":
            lines.append(
                f"PUBLIC PRESENCE: {f['name']} absent or null is released as null: whether a "
                "record holds it is published in the clear, outside the guarantee"
            )
    return lines


def _memo_lines(fields: list[dict[str, Any]]) -> list[str]:
    by_key = [f["name"] for f in fields if f.get("memo_identity") == "message_key"]
    by_field = [f"{f['name']} (by {f['memoize_by']})" for f in fields if f.get("memoize_by")]
    lines: list[str] = []
    if by_key or by_field:
        lines.append(
            f"memoized (one answer per device and value, ever): {', '.join(by_key + by_field)}; "
            "whether a device's value changed is not protected"
        )
    if by_key:
        lines.append(
            f"memoized by the Kafka message key: {', '.join(by_key)}; this trusts the key: "
            "the collector must set it from the device's authenticated session (whoever can "
            "write a record with a device's key can query that device's answers)"
        )
    if by_field:
        lines.append(
            f"FORGEABLE memo identity: {', '.join(by_field)}; {FORGEABLE}: the epsilon of "
            "these fields holds only if no untrusted party writes the raw topic "
            "(memo_identity_trusted: true)"
        )
    return lines


def _num(value: object) -> str:
    return "-" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)


#: the width ``privstream explain`` fits its table into, unless ``--wide``
TABLE_WIDTH = 100


def render_table(data: dict[str, Any], width: int | None = None) -> str:
    """The table and the record's guarantee; within ``width`` columns when given.

    A table wider than ``width`` moves each field's params to indented lines
    of their own under its row, wrapped between parameters; the notes below
    are wrapped too. ``width`` None: one line per field, however wide.
    """
    header = ("field", "kind", "mechanism", "epsilon", "delta", "params", "E[error]", "gamma LB")
    rows: list[tuple[str, ...]] = [header]
    for f in data["fields"]:
        params = " ".join(f"{k}={_num(v)}" for k, v in f["params"].items())
        rows.append(
            (
                f["name"],
                f["kind"],
                f["mechanism"] or _unnoised(f),
                _num(f["epsilon"]),
                _num(f["delta"]),
                params or "-",
                _num(f["expected_error"]),
                _num(f["gamma_lower_bound"]),
            )
        )
    lines = _grid(rows)
    if width is not None and max(map(len, lines)) > width:
        lines = _grid_params_below(rows, width)
    rec = data["record"]
    notes = [
        f"per record (event level, basic composition): epsilon={_num(rec['epsilon'])} "
        f"delta={_num(rec['delta'])}"
    ]
    if rec["group_size"] > 1:
        notes.append(
            f"per individual behind up to {rec['group_size']} records (group privacy): "
            f"epsilon={_num(rec['group_epsilon'])} delta={_num(rec['group_delta'])}"
        )
    notes.append(
        f"declared budget: epsilon={_num(rec['budget_epsilon'])} delta={_num(rec['budget_delta'])}"
    )
    from privstream.ledger.guarantee import ledger_lines  # as in explain_data

    notes.extend(ledger_lines(data["ledger"]))
    notes.append(f"config sha256: {data['config_sha256']}")
    notes.append(_metrics_line(data["metrics"]))
    notes.extend(
        f"NOT PRIVATE: {f['name']} is {f['public_transform']}"
        for f in data["fields"]
        if f.get("public_transform")
    )
    notes.extend(_memo_lines(data["fields"]))
    notes.extend(_missing_lines(data["fields"]))
    notes.extend(_auto_lines(data["fields"]))
    notes.extend(_optimality_lines(data["fields"]))
    from privstream.cli.explain_aggregates import aggregates_lines  # as in explain_data

    table, aggregate_notes = aggregates_lines(data.get("aggregates"))
    notes.extend(aggregate_notes)
    if width is not None:
        notes = [part for note in notes for part in _wrap(note, width, "  ")]
    return "\n".join([*lines, "", *notes, *(["", *table] if table else [])])


def _unnoised(field: dict[str, Any]) -> str:
    """The mechanism column of a field without noise."""
    if field["kind"] == "drop":
        return "removed"
    if field.get("granularity"):
        return f"truncated to {field['granularity']}, as is"
    return "copied as is"


def _grid(rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns two spaces apart, a rule under the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _grid_params_below(rows: list[tuple[str, ...]], width: int) -> list[str]:
    """The table without its params column; each field's params wrapped under its row."""
    params_at = rows[0].index("params")
    narrow = [r[:params_at] + r[params_at + 1 :] for r in rows]
    # a long field name is cut (with an ellipsis) to what the other columns leave
    rest = max(len(line) for line in _grid([r[1:] for r in narrow])) + 2
    room = max(width - rest, len(rows[0][0]))
    narrow = [(_cut(r[0], room), *r[1:]) for r in narrow]
    table = _grid(narrow)
    lines = table[:2]
    for row, line in zip(rows[1:], table[2:], strict=True):
        lines.append(line)
        if row[params_at] != "-":
            lines.extend(_wrap(row[params_at], width, "    ", first="    "))
    return lines


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: room - 1] + "\u2026"


def _wrap(text: str, width: int, indent: str, first: str = "") -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken between words."""
    return textwrap.wrap(
        text,
        width,
        initial_indent=first,
        subsequent_indent=indent,
        break_on_hyphens=False,
    )


def _metrics_line(metrics: dict[str, Any]) -> str:
    clamped = metrics["clamped_counts"]
    if clamped is None:
        return "metrics: epsilon=0 (error metrics from canary draws; clamped counts off)"
    line = (
        f"metrics: clamped counts with discrete Laplace noise per {_num(clamped['window_seconds'])}"
        f" s window, epsilon={_num(clamped['epsilon'])} per record on top of the releases: "
        f"epsilon={_num(metrics['record_epsilon_with_metrics'])} per record in all"
    )
    if clamped["group_epsilon"] != clamped["epsilon"]:
        line += f" (clamped counts per individual: epsilon={_num(clamped['group_epsilon'])})"
    return line


def explain(config: AppConfig, plan: RecordPlan, fmt: str, width: int | None = None) -> str:
    """JSON, or the table within ``width`` columns (None: one line per field)."""
    data = explain_data(config, plan)
    return json.dumps(data, indent=2) if fmt == "json" else render_table(data, width)

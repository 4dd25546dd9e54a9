"""The estimate report: one JSON-ready dict, and its table rendering."""

from __future__ import annotations

from typing import Any

from privstream.estimate import suppression
from privstream.estimate.accumulators import Options
from privstream.estimate.aggregate import StreamAggregate, TruthAggregate
from privstream.estimate.groups import NOISED_SPLIT, GroupedAggregate
from privstream.estimate.presence import add_present_estimates
from privstream.estimate.small_n import range_warnings


def build_report(
    stream: StreamAggregate,
    source: dict[str, Any],
    options: Options,
    truth: TruthAggregate | None = None,
    truth_path: str | None = None,
) -> dict[str, Any]:
    """Every field's estimates (the estimator functions of ``privstream.mechanisms``)."""
    fields = []
    for acc in stream.fields:
        known = truth.truths.get(acc.name) if truth is not None else None
        fields.append(acc.report(options, known))
    add_present_estimates(stream.plan, fields, options)
    for entry in fields:
        entry["warnings"] = range_warnings(entry)
    report: dict[str, Any] = {
        "source": source,
        "config_sha256": stream.plan.config_sha256,
        "records_read": stream.records,
        "records_skipped": dict(sorted(stream.skipped.items())),
        "confidence": options.confidence,
        "intervals": (
            "normal intervals estimate +- z stderr; stderr is the noise's, given the records "
            "(what the records hold); *_population intervals also carry the spread between "
            "records (records as iid draws from a population)"
        ),
        "truth": None,
        "fields": fields,
    }
    if isinstance(stream, GroupedAggregate):
        report["by"] = _by_report(stream, options)
    if truth is not None:
        report["truth"] = {
            "path": truth_path,
            "records": truth.records,
            "skipped": dict(sorted(truth.skipped.items())),
        }
    return report


def _by_report(stream: GroupedAggregate, options: Options) -> dict[str, Any]:
    """Each group's field entries (no truth: ``--truth`` compares the overall estimates)."""
    planned = {f.name: f for f in stream.plan.fields}[stream.by]
    mechanism = planned.handler.mechanism
    groups = []
    for value, group in sorted(stream.groups.items()):
        fields = [acc.report(options, None) for acc in group.fields]
        add_present_estimates(stream.plan, fields, options)
        for entry in fields:
            entry["warnings"] = range_warnings(entry)
        groups.append({"value": value, "records": group.records, "fields": fields})
    return {
        "field": stream.by,
        "noised": None if mechanism is None else NOISED_SPLIT.format(stream.by, mechanism.name),
        "ungrouped": dict(sorted(stream.ungrouped.items())),
        "groups": groups,
    }


def report_warnings(report: dict[str, Any]) -> list[str]:
    """The warnings for stderr: each field's estimates out of range (``small_n``), and one
    line per field whose values its mechanism cannot have released.

    A sanitized value is impossible when it is malformed for the field (not
    a bool for a boolean, a category outside the domain, a non-number for a
    number: counted as ``invalid``) or, for real and integer fields, off the
    mechanism's output grid. Either means the input is not (only) this
    config's output: raw records, another release, or edited data.
    """
    lines = [f"field {entry['name']}: {w}" for entry in report["fields"] for w in entry["warnings"]]
    by = report.get("by")
    if by is not None:
        lines += [by["noised"]] if by["noised"] else []
        lines += [
            f"--by {by['field']} = {group['value']}: field {entry['name']}: {w}"
            for group in by["groups"]
            for entry in group["fields"]
            for w in entry["warnings"]
        ]
    for entry in report["fields"]:
        invalid = entry["skipped"].get("invalid", 0)
        off_grid = entry.get("off_grid", 0)
        if invalid:
            lines.append(
                f"field {entry['name']}: {invalid:,} values impossible under this config "
                f"(not a {entry['kind']} value {entry['mechanism']} can release; skipped): "
                "is the input raw or from another config?"
            )
        if off_grid:
            lines.append(
                f"field {entry['name']}: {off_grid:,} of {entry['records']:,} values are off "
                f"the {entry['mechanism']} output grid (impossible under this config; "
                "counted anyway): is the input raw or from another config?"
            )
    return lines


def _f(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _g(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _ci(pair: list[Any], fmt: Any = _f) -> str:
    low, high = pair
    if low is None or high is None:
        return "-"
    return f"[{fmt(low)}, {fmt(high)}]"


def _columns(rows: list[tuple[str, ...]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append(indent + "  ".join(cells).rstrip())
    return lines


def _skips(skipped: dict[str, int]) -> str:
    return ", ".join(f"{reason} {count}" for reason, count in skipped.items())


def _source_line(report: dict[str, Any]) -> str:
    source = report["source"]
    where = (
        f"topic {source['topic']} ({source.get('partitions', '?')} partitions, read_committed)"
        if source.get("type") == "topic"
        else str(source.get("path", "stdin"))
    )
    read = report["records_read"]
    text = f"privstream estimate: {read:,} record{'' if read == 1 else 's'} from {where}"
    if source.get("records_without_config_header"):
        text += (
            f" ({source['records_without_config_header']:,} without a "
            "privstream-config-sha256 header, read anyway)"
        )
    if report["records_skipped"]:
        text += f"; skipped: {_skips(report['records_skipped'])}"
    return text


def _frequency_lines(entry: dict[str, Any], level: str) -> list[str]:
    rows = sorted(entry.get("frequencies", []), key=lambda r: -r["estimate"])
    if not rows:
        return []
    has_raw = any("raw_share" in r for r in rows)
    has_true = any("true" in r for r in rows)
    header = ["value", "estimate", "stderr", f"{level} CI"]
    header += ["raw share"] if has_raw else []
    header += ["true"] if has_true else []
    table = [tuple(header)]
    for r in rows:
        cells = [str(r["value"]), _f(r["estimate"]), _f(r["stderr"]), _ci(r["ci"])]
        cells += [_f(r.get("raw_share"))] if has_raw else []
        cells += [_f(r.get("true"))] if has_true else []
        table.append(tuple(cells))
    return [f"  {entry['estimator']}; sorted by estimate", *_columns(table)]


def _mean_lines(entry: dict[str, Any], level: str) -> list[str]:
    mean = entry.get("mean")
    if mean is None:
        return []
    lines = [
        f"  mean {_g(mean['estimate'])}  stderr {_g(mean['stderr'])}  {level} CI "
        f"{_ci(mean['ci'], _g)} (noise only: the mean of these records' clamped values)",
        f"       {level} CI {_ci(mean['ci_population'], _g)} with the spread between records "
        f"(a population's mean; stderr {_g(mean['stderr_population'])})",
    ]
    if "true" in mean:
        lines.append(
            f"       true: {_g(mean['true'])} clamped, {_g(mean['true_unclamped'])} unclamped "
            f"({mean['true_outside_bounds']} values outside the bounds)"
        )
    return lines


def _histogram_lines(entry: dict[str, Any], level: str) -> list[str]:
    if entry.get("no_histogram"):
        return [f"  histogram: none can be had: {entry['no_histogram']}"]
    hist = entry.get("histogram")
    if hist is None:
        return []
    has_true = any("true" in b for b in hist["bins"])
    table: list[tuple[str, ...]] = [
        ("bin", "estimate", "stderr", f"{level} CI", "noisy share", *(("true",) * has_true))
    ]
    for b in hist["bins"]:
        if hist["integer_bins"]:
            span = (
                f"{b['lower']:g}" if b["lower"] == b["upper"] else f"{b['lower']:g}..{b['upper']:g}"
            )
        else:
            span = f"[{b['lower']:.6g}, {b['upper']:.6g})"
        if b.get("unreliable"):
            cells = (span, "withheld", "-", "-", _f(b["noisy_share"]))
        else:
            ci = _ci(b["ci"]) if "ci" in b else "-"
            cells = (span, _f(b["estimate"]), _f(b["stderr"]), ci, _f(b["noisy_share"]))
        table.append(cells + ((_f(b.get("true")),) if has_true else ()))
    lines = [f"  histogram: {hist['method']}", *_columns(table, "    ")]
    withheld = [b for b in hist["bins"] if b.get("unreliable")]
    if withheld:
        lines.append(
            f"    {len(withheld)} of {len(hist['bins'])} bins withheld: too fine for these "
            f"records and this epsilon ({withheld[0]['unreliable']}); the rule reads only n, "
            "epsilon, the bounds and --bins: try fewer --bins, or more records; the mean "
            "above is unbiased"
        )
    elif "intervals" in hist:  # an estimator that states its own intervals (square_wave)
        lines.append(f"    intervals: {hist['intervals']}")
    elif any("ci" in b for b in hist["bins"]):
        lines.append(
            "    intervals: +- z sqrt(stderr^2 + bias^2), the bias bounded over the shapes "
            "the records cannot tell apart (each bin's share spread evenly or on one point): "
            "conservative"
        )
    low, high = hist.get("at_bounds", (0.0, 0.0))  # square_wave fits no point masses
    if low or high:
        err_low, err_high = hist["at_bounds_stderr"]
        lines.append(
            f"    of which point masses at the bounds: lower {_f(low)} (stderr {_f(err_low)}), "
            f"upper {_f(high)} (stderr {_f(err_high)})"
        )
    return lines


def _curve_lines(entry: dict[str, Any], level: str) -> list[str]:
    curve = entry.get("curve")
    if curve is None:
        return []
    has_true = "true" in curve
    table: list[tuple[str, ...]] = [
        (
            "point",
            "mean",
            "stderr",
            f"{level} CI",
            "population CI",
            *(("true",) if has_true else ()),
        )
    ]
    for i, point in enumerate(curve["points"]):
        cells = (
            f"{point:g}",
            _g(curve["mean"][i]),
            _g(curve["stderr"][i]),
            _ci([curve["ci_low"][i], curve["ci_high"][i]], _g),
            _ci([curve["ci_population_low"][i], curve["ci_population_high"][i]], _g),
        )
        table.append(cells + ((_g(curve["true"][i]),) if has_true else ()))
    return _columns(table)


def render_table(report: dict[str, Any]) -> str:
    level = f"{report['confidence']:.0%}"
    lines = [_source_line(report)]
    for name, refusal in report["source"].get("refused", {}).items():
        lines.append(f"refused: field {name}: {refusal['reason']}")
    ledger = suppression.render(report["source"].get("ledger"))
    if ledger is not None:
        lines.append(ledger)
    truth = report.get("truth")
    if truth:
        text = f"truth: {truth['records']:,} raw records from {truth['path']}"
        if truth["skipped"]:
            text += f" (skipped as the sanitizer would: {_skips(truth['skipped'])})"
        lines.append(text)
    for entry in report["fields"]:
        lines += _field_lines(entry, level)
    lines += _by_lines(report.get("by"), level)
    return "\n".join(lines)


def _by_lines(by: dict[str, Any] | None, level: str) -> list[str]:
    if by is None:
        return []
    lines = ["", f"by {by['field']}: {len(by['groups'])} groups"]
    if by["noised"]:
        lines.append(f"warning: {by['noised']}")
    if by["ungrouped"]:
        lines.append(f"not in any group: {_skips(by['ungrouped'])}")
    for group in by["groups"]:
        lines += ["", f"== {by['field']} = {group['value']}  ({group['records']:,} records)"]
        for entry in group["fields"]:
            lines += _field_lines(entry, level)
    return lines


def _field_lines(entry: dict[str, Any], level: str) -> list[str]:
    lines = [""]
    head = (
        f"{entry['name']}  {entry['kind']}  {entry['mechanism']}  "
        f"eps={entry['epsilon']:g} delta={entry['delta']:g}  n={entry['records']:,}"
    )
    if entry["skipped"]:
        head += f"  (skipped: {_skips(entry['skipped'])})"
    lines.append(head)
    if entry["records"] == 0:
        lines.append("  no usable values")
    lines += _frequency_lines(entry, level)
    lines += _mean_lines(entry, level)
    lines += _histogram_lines(entry, level)
    lines += _curve_lines(entry, level)
    lines += [f"  warning: {warning}" for warning in entry.get("warnings", ())]
    lines += [f"  note: {note}" for note in entry["notes"]]
    return lines

"""Render an audit report as a table (for people) or JSON (for CI)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from privstream.audit.engine import AuditResult
from privstream.audit.run import AuditReport


def _num(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    return f"{value:.{digits}g}"


def _bound(value: float) -> float | None:
    return None if math.isinf(value) or math.isnan(value) else value


def result_data(result: AuditResult) -> dict[str, Any]:
    """One audit as JSON-ready data."""
    data: dict[str, Any] = {
        "name": result.name,
        "mechanism": result.mechanism,
        "claimed_epsilon": result.claimed_epsilon,
        "claimed_delta": result.claimed_delta,
        "epsilon_lower_bound": _bound(result.epsilon_lower_bound),
        "passed": result.passed,
        "worst_test_set": result.worst_event,
        "worst_pair": result.worst_pair,
        "p_hat": result.p_hat,
        "q_hat": result.q_hat,
        "point_estimate": _bound(result.point_estimate)
        if result.point_estimate is not None
        else None,
        "samples_per_input": result.samples,
        "pilot_samples_per_input": result.pilot_samples,
        "inputs": result.inputs,
        "test_sets": result.test_sets,
        "alpha": result.alpha,
        "seconds": round(result.seconds, 3),
        "notes": list(result.notes),
    }
    if result.expect_violation is not None:
        data.update(
            expected="fail" if result.expect_violation else "pass",
            as_expected=result.as_expected,
            false_pass_bound=result.false_pass_bound,
            about=result.about,
            observed=[
                {
                    "test_set": o.event,
                    "under": o.under,
                    "versus": o.versus,
                    "p_hat": o.p_hat,
                    "q_hat": o.q_hat,
                }
                for o in result.observed
            ],
        )
    return data


def report_data(report: AuditReport) -> dict[str, Any]:
    """The whole report as JSON-ready data."""
    return {
        "passed": report.passed,
        "config_passed": report.config_passed,
        "self_check_passed": report.self_check_passed,
        "samples_per_input": report.samples,
        "confidence": report.confidence,
        "false_failure_probability": 1.0 - report.confidence,
        "alpha_per_audit": report.alpha_per_audit,
        "fields": [result_data(r) for r in report.fields],
        "record": result_data(report.record) if report.record is not None else None,
        "aggregates": [result_data(r) for r in report.aggregates],
        "not_audited": list(report.skipped),
        "self_check": [result_data(r) for r in report.self_check],
        "records_processed": report.records_processed,
        "aggregate_releases": report.releases_drawn,
        "run_time_seconds": round(report.seconds, 3),
    }


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _where(result: AuditResult) -> str:
    if result.worst_event is None:
        return "-"
    return f"{result.worst_event} [{result.worst_pair}]"


def render_table(report: AuditReport) -> str:
    """The human-readable report (stdout of ``privstream audit``)."""
    lines = [
        f"privstream audit: {report.samples} draws per input through the pipeline "
        f"(os.urandom noise); confidence {report.confidence:g}: a correct mechanism is "
        f"reported failing with probability <= {1.0 - report.confidence:.3g} for the whole run",
        "",
    ]
    audits = [
        *report.fields,
        *([report.record] if report.record is not None else []),
        *report.aggregates,
    ]
    if audits:
        header = ("field", "mechanism", "claimed eps", "delta", "eps lower bound", "result")
        rows: list[tuple[str, ...]] = [header]
        rows.extend(
            (
                r.name,
                r.mechanism if r is not report.record else "composition",
                _num(r.claimed_epsilon),
                _num(r.claimed_delta, 3),
                _num(r.epsilon_lower_bound),
                "pass" if r.passed else "FAIL",
            )
            for r in audits
        )
        lines += _table(rows)
        lines.append("")
        lines.append("worst test set per audit (the set giving the lower bound):")
        for r in audits:
            lines.append(f"  {r.name}: {_where(r)}")
            lines.extend(f"    note: {note}" for note in r.notes)
        if report.skipped:
            lines.append(f"not audited (not named by --field): {', '.join(report.skipped)}")
        lines.append("")
    if report.self_check:
        checks: list[tuple[str, ...]] = [
            ("self-check", "claimed eps", "delta", "eps lower bound", "must", "got", "ok")
        ]
        checks.extend(
            (
                r.name,
                _num(r.claimed_epsilon),
                _num(r.claimed_delta, 3),
                _num(r.epsilon_lower_bound),
                "fail" if r.expect_violation else "pass",
                "pass" if r.passed else "fail",
                "yes" if r.as_expected else "NO",
            )
            for r in report.self_check
        )
        lines += _table(checks)
        for r in report.self_check:
            extra = ""
            if r.false_pass_bound is not None:
                extra = f" (P[audit wrongly passes it] <= {r.false_pass_bound:.2g})"
            lines.append(f"  {r.name}: {r.about}{extra}")
            lines.extend(
                f"    observed P_hat[{o.event}] = {o.p_hat:.4f} under {o.under}, "
                f"{o.q_hat:.4f} under {o.versus}"
                for o in r.observed
            )
        lines.append("")
    verdict = "PASS" if report.passed else "FAIL"
    if not report.self_check_passed:
        verdict += " (the self-check did not come out as it must: the audit is not trustworthy)"
    lines.append(f"result: {verdict}")
    lines.append(
        f"run time: {report.seconds:.1f} s "
        f"({report.records_processed} records through the pipeline"
        + (f", {report.releases_drawn} aggregate releases" if report.releases_drawn else "")
        + ")"
    )
    return "\n".join(lines)


def render_json(report: AuditReport) -> str:
    return json.dumps(report_data(report), indent=2)

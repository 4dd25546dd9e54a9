"""The alerting rules in deploy/prometheus/: promtool's checks and unit tests, and
that they only query metrics the service exports.

``promtool`` comes with Debian's ``prometheus`` package (``make system-deps``
installs it). A missing promtool fails these tests instead of skipping them:
rules that were never checked must not pass for checked ones.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from privstream.cli.main import DEFAULT_MAX_DEAD_LETTER_SHARE
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.metrics import Metrics
from privstream.pipeline import process_batch
from privstream.testing import SeededSource
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.configs import config_dict

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
RULES_TEST = ROOT / "deploy" / "prometheus" / "rules_test.yml"

#: the alerts the issue asks for (more may exist)
REQUIRED_ALERTS = {
    "PrivstreamWorkerDown",
    "PrivstreamBrokerDisconnected",
    "PrivstreamDeadLetterRateHigh",
    "PrivstreamConsumerLagHigh",
    "PrivstreamObservedErrorDrift",
    "PrivstreamErrorBelowGammaBound",
    "PrivstreamTransactionsAborting",
}
#: labels every per-field join must match on: the field metrics' own labels and the
#: scrape's, so one worker's field is never compared with another's
FIELD_JOIN = {"instance", "job", "field", "mechanism"}
#: scraped by Prometheus itself, not exported by the worker
PROMETHEUS_SERIES = {"up"}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is not installed: `make system-deps` installs it (Debian package prometheus)"
        )
    return path


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@cache
def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in rules() if "alert" in rule}


def recorded() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


# --- promtool -----------------------------------------------------------------


def test_promtool_check_rules() -> None:
    result = run_promtool("check", "rules", str(RULES.relative_to(ROOT)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    result = run_promtool("test", "rules", str(RULES_TEST.relative_to(ROOT)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# --- the rules' shape ---------------------------------------------------------


def test_the_required_alerts_exist_with_severity_summary_description_and_runbook() -> None:
    found = alerts()
    assert set(found) >= REQUIRED_ALERTS, REQUIRED_ALERTS - set(found)
    for name, rule in found.items():
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        for key in ("summary", "description", "runbook"):
            assert str(rule["annotations"].get(key, "")).strip(), f"{name}: no {key}"
    assert found["PrivstreamErrorBelowGammaBound"]["labels"] == {
        "severity": "critical",
        "page": "true",
    }
    assert found["PrivstreamObservedErrorDrift"]["labels"]["severity"] == "critical"


def test_field_alerts_name_the_field_and_join_on_field_mechanism_and_target() -> None:
    for name in ("PrivstreamObservedErrorDrift", "PrivstreamErrorBelowGammaBound"):
        rule = alerts()[name]
        assert "{{ $labels.field }}" in rule["annotations"]["summary"], name
        assert "{{ $labels.field }}" in rule["annotations"]["description"], name
    field_rules = [r for r in rules() if "privstream_field_" in r["expr"] or "field_" in r["expr"]]
    joins = 0
    for rule in field_rules:
        for group in re.findall(r"\b(on|ignoring)\s*\(([^)]*)\)", rule["expr"]):
            joins += 1
            keyword, names = group
            assert keyword == "on", f"{rule.get('record') or rule['alert']}: {keyword}(...)"
            assert {n.strip() for n in names.split(",")} == FIELD_JOIN, rule["expr"]
    assert joins >= 10


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    cases = [case for test in yaml.safe_load(RULES_TEST.read_text())["tests"] for case in
             test.get("alert_rule_test", [])]  # fmt: skip
    for name in alerts():
        mine = [case for case in cases if case["alertname"] == name]
        assert any(case["exp_alerts"] for case in mine), f"{name}: no test where it fires"
        assert any(not case["exp_alerts"] for case in mine), f"{name}: no test where it is quiet"


def test_the_dead_letter_alert_bounds_the_share_sanitize_bounds() -> None:
    """The worker's alert and file mode's exit 1 judge the same share (dead letters over
    records in) against the same default limit; the share's values are unit-tested."""
    name = "privstream:records_dead_lettered:share5m"
    share = next(r for r in rules() if r.get("record") == name)
    assert series_names(share["expr"]) == {
        "privstream_records_dead_lettered_total",
        "privstream_records_in_total",
    }
    numerator, denominator = share["expr"].split("/ on(job)")
    assert "privstream_records_dead_lettered_total" in numerator
    assert series_names(denominator) == {"privstream_records_in_total"}
    limit = re.fullmatch(
        re.escape(name) + r" > ([0-9.]+)",
        alerts()["PrivstreamDeadLetterRateHigh"]["expr"].strip(),
    )
    assert limit is not None
    assert float(limit[1]) == DEFAULT_MAX_DEAD_LETTER_SHARE
    exprs = [case["expr"] for test in yaml.safe_load(RULES_TEST.read_text())["tests"]
             for case in test.get("promql_expr_test", [])]  # fmt: skip
    assert any(name in expr for expr in exprs)


# --- the metrics the rules query ----------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
#: an identifier that is not part of a number or another name and not called
_NAME = re.compile(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "group_left", "group_right"}


def series_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, labels, keywords left out)."""
    for pattern in (_STRING, _MATCHERS, _RANGE, _LABEL_LIST):
        expr = pattern.sub(" ", expr)
    return {name for name in _NAME.findall(expr) if name.lower() not in _KEYWORDS}


def test_series_names_parser() -> None:
    expr = (
        'sum by (job) (rate(a_total{reason="x{y}"}[5m])) / on(job) group_left '
        "sum without (le) (b_bucket offset 1m) > 1e5 * c:rec and 0.1 * d unless inf"
    )
    assert series_names(expr) == {"a_total", "b_bucket", "c:rec", "d"}


def exported_series() -> set[str]:
    """Every sample name a worker exposes after one batch: the service's instruments
    driven as the worker loop drives them, scraped in the exposition format."""
    config = parse_config(
        config_dict(
            [
                {"name": "seq", "kind": "public"},
                {"name": "amount", "kind": "real", "bounds": [0, 100], "epsilon": 1.0},
                # a bounded-real mechanism: the signed canary statistic's series
                {
                    "name": "latency",
                    "kind": "real",
                    "bounds": [0, 9],
                    "epsilon": 1.0,
                    "mechanism": "hybrid",
                },
                {"name": "clicks", "kind": "integer", "bounds": [0, 20], "epsilon": 1.0},
                {"name": "tier", "kind": "categorical", "domain": ["a", "b"], "epsilon": 1.0},
                {"name": "opted_in", "kind": "boolean", "epsilon": 1.0},
            ],
            epsilon=5.0,
        )
    )
    plan = build_plan(config)
    metrics = Metrics(CollectorRegistry())
    metrics.describe_plan(plan)
    good = [
        json.dumps(
            {"seq": i, "amount": 5.0, "latency": 1.0, "clicks": 3, "tier": "a", "opted_in": True}
        ).encode()
        for i in range(20)
    ]
    result = process_batch(plan, [*good, b"{oops"], SeededSource(1))
    assert result.dead_letters  # so the dead-letter counter has a child
    metrics.records_in.inc(len(good) + 1)
    metrics.records_out.inc(len(result.outputs))
    metrics.count_dead_letters(result.dead_letters)
    metrics.batch_records.observe(len(good) + 1)
    metrics.batch_seconds.observe(0.01)
    metrics.broker_connected.set(1)
    metrics.transactions.labels("committed").inc()
    metrics.consumer_lag.labels("0").set(0)
    metrics.undecodable_batches.labels("raw", "0").inc()  # a partition stopped at a batch
    metrics.observe_fields(result.observations)
    text = generate_latest(metrics.registry).decode()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def test_every_metric_the_rules_query_is_exported() -> None:
    used: set[str] = set()
    for rule in rules():
        used |= series_names(rule["expr"])
    own = recorded()
    assert own <= used  # every recorded series is queried by something
    queried = used - own
    # the parser found what the alerts are about
    assert {
        "up",
        "privstream_broker_connected",
        "privstream_records_dead_lettered_total",
        "privstream_records_in_total",
        "privstream_consumer_lag_records",
        "privstream_transactions_total",
        "privstream_undecodable_batches_total",
        "privstream_field_canary_error_sum",
        "privstream_field_canary_error_count",
        "privstream_field_canary_expected_error",
        "privstream_field_canary_error_second_moment",
        "privstream_field_canary_bias_bound",
        "privstream_field_canary_overshoot_total",
        "privstream_field_canary_undershoot_total",
        "privstream_field_gamma_lower_bound",
    } <= queried
    missing = queried - exported_series() - PROMETHEUS_SERIES
    assert not missing, f"the rules query series the service does not export: {sorted(missing)}"

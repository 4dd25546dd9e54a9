r"""One audit run over a config: its fields, its whole record, the self-check.

Confidence. ``confidence`` (default 0.999) is that of the whole run: its
``alpha = 1 - confidence`` is split evenly over the run's audits (fields,
record, self-check scenarios), ``alpha_audit = alpha / A``, and each audit
splits its share again over its intervals (``privstream.audit.stats``). So the
probability that a run wrongly reports a correct mechanism as failing (a
config field, the record, or a calibrated self-check control) is at most
``1 - confidence``, whatever the number of fields. The self-check's broken
mechanisms are held to the same ``alpha_audit``: a stricter level makes
them harder to catch, so catching them is at least as convincing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from privstream.audit.aggregate_controls import DEFAULT_AGGREGATE_SAMPLES, AggregateScenarios
from privstream.audit.engine import (
    DEFAULT_CONFIDENCE,
    DEFAULT_SAMPLES,
    AuditResult,
    Progress,
    Scenario,
    run_scenario,
)
from privstream.audit.scenarios import PlanAuditor
from privstream.audit.selfcheck import self_check_scenarios
from privstream.config import AppConfig
from privstream.errors import AuditError
from privstream.pipeline import RecordPlan


@dataclass(frozen=True)
class AuditReport:
    """Everything one ``privstream audit`` run found."""

    samples: int
    confidence: float
    alpha_per_audit: float
    fields: tuple[AuditResult, ...]
    record: AuditResult | None
    self_check: tuple[AuditResult, ...]
    seconds: float
    records_processed: int
    #: fields with a mechanism that were not audited (``--field`` given)
    skipped: tuple[str, ...] = ()
    #: the config's aggregates (``privstream.audit.aggregates``)
    aggregates: tuple[AuditResult, ...] = ()
    #: releases of aggregates drawn
    releases_drawn: int = 0

    @property
    def config_passed(self) -> bool:
        audits = [*self.fields, *([self.record] if self.record else []), *self.aggregates]
        return all(a.passed for a in audits)

    @property
    def self_check_passed(self) -> bool:
        return all(a.as_expected for a in self.self_check)

    @property
    def passed(self) -> bool:
        """Every config audit passed and every self-check scenario came out as it must."""
        return self.config_passed and self.self_check_passed


def audit(
    config: AppConfig | None,
    plan: RecordPlan | None,
    *,
    samples: int = DEFAULT_SAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    fields: Sequence[str] | None = None,
    record: bool | None = None,
    self_check: bool = True,
    progress: Progress | None = None,
    aggregates: Sequence[str] | None = None,
    aggregate_samples: int = DEFAULT_AGGREGATE_SAMPLES,
) -> AuditReport:
    """Audit ``plan`` (built from ``config``) and/or run the self-check.

    ``fields``: audit only these (default: every field with a mechanism);
    ``aggregates``: audit only these aggregates (default: all of them unless
    ``fields`` are given, then none); ``record``: the whole-record audit
    (default: when neither is given). ``config``/``plan`` may be None for a
    self-check-only run. Aggregates draw ``min(samples, aggregate_samples)``
    releases per input (one ``release`` call each).
    """
    if samples < 100:
        raise AuditError(f"--samples {samples} is too small; use at least 100 (default 100000)")
    if not 0.0 < confidence < 1.0:
        raise AuditError(f"--confidence {confidence} must lie strictly between 0 and 1")
    if aggregate_samples < 100:
        raise AuditError(
            f"--aggregate-samples {aggregate_samples} is too small; use at least 100 "
            f"(default {DEFAULT_AGGREGATE_SAMPLES})"
        )
    began = time.perf_counter()
    scenarios: list[Scenario] = []
    kinds: list[str] = []
    skipped: tuple[str, ...] = ()
    chosen_aggregates: AggregateScenarios | None = None
    if plan is not None and config is not None:
        chosen_aggregates = AggregateScenarios.of(config, aggregates, fields, aggregate_samples)
        auditor = PlanAuditor(plan)
        names = [t.name for t in auditor.targets]
        only_aggregates = fields is None and aggregates is not None
        chosen = (
            []
            if only_aggregates
            else list(names)
            if fields is None
            else list(dict.fromkeys(fields))
        )
        for name in chosen:
            if name not in auditor.by_name:
                raise AuditError(
                    f"--field {name}: no such field with a mechanism "
                    f"(noised fields: {', '.join(names) or 'none'})"
                )
            scenarios.append(auditor.field_scenario(name))
            kinds.append("field")
        skipped = tuple(n for n in names if n not in chosen)
        want_record = fields is None and aggregates is None if record is None else record
        if want_record:
            scenarios.append(auditor.record_scenario())
            kinds.append("record")
        scenarios += chosen_aggregates.audits
        kinds += ["aggregate"] * len(chosen_aggregates.audits)
    if self_check:
        controls = [] if chosen_aggregates is None else chosen_aggregates.controls
        for scenario in [*self_check_scenarios(), *controls]:
            scenarios.append(scenario)
            kinds.append("self")
    if not scenarios:
        raise AuditError("nothing to audit")
    alpha = (1.0 - confidence) / len(scenarios)
    results = [run_scenario(s, samples, alpha, progress) for s in scenarios]
    by_kind = list(zip(kinds, results, strict=True))
    samplers = {id(s.sampler): s.sampler for s in scenarios if s.sampler is not None}
    records = sum(sampler.records for sampler in samplers.values())
    return AuditReport(
        samples=samples,
        confidence=confidence,
        alpha_per_audit=alpha,
        fields=tuple(r for k, r in by_kind if k == "field"),
        record=next((r for k, r in by_kind if k == "record"), None),
        self_check=tuple(r for k, r in by_kind if k == "self"),
        seconds=time.perf_counter() - began,
        records_processed=records,
        skipped=skipped,
        aggregates=tuple(r for k, r in by_kind if k == "aggregate"),
        releases_drawn=0 if chosen_aggregates is None else chosen_aggregates.releases,
    )

"""Empirical privacy audit: lower bounds on the realised epsilon, through the real pipeline.

``privstream audit`` (``privstream.cli.audit``) runs ``audit``: for every noised
field, worst-case neighbouring raw values are sanitized many times by
``process_batch`` with the production noise source, and Clopper-Pearson
intervals on a family of test sets (thesis Theorem 4.1) give a lower bound
on the epsilon the release actually has; the field fails when that bound
exceeds its claim. The same for the whole record and for each aggregate
(over neighbouring windows), and a self-check shows that broken mechanisms
are caught. Modules:

* ``stats``: the bounds, their confidence, the exact power computation.
* ``events``: test sets and their families.
* ``targets``: worst-case inputs per field kind.
* ``sampling``: records through the pipeline (memoized fields included).
* ``engine``: one audit (pilot, count, bound).
* ``scenarios``: the per-field and whole-record audits of a config.
* ``aggregate_inputs``, ``aggregates``, ``aggregate_controls``: the audits
  of a config's aggregates (neighbouring windows through the real release
  code) and their half-noise controls.
* ``selfcheck``: deliberately broken mechanisms and thesis Example 4.5.
* ``run`` / ``report``: a whole run and its rendering.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from privstream.errors import AuditError
from privstream.lazy import lazy_attributes

if TYPE_CHECKING:
    from privstream.audit.aggregate_controls import DEFAULT_AGGREGATE_SAMPLES
    from privstream.audit.engine import DEFAULT_CONFIDENCE, DEFAULT_SAMPLES, AuditResult
    from privstream.audit.report import render_json, render_table, report_data
    from privstream.audit.run import AuditReport, audit

#: name -> module; imported on first use: the field-kind registry imports ``targets``
#: on every start-up, which must not pay for the engine, the runs and their reports
_LAZY = {
    "DEFAULT_AGGREGATE_SAMPLES": "aggregate_controls",
    "DEFAULT_CONFIDENCE": "engine",
    "DEFAULT_SAMPLES": "engine",
    "AuditResult": "engine",
    "render_json": "report",
    "render_table": "report",
    "report_data": "report",
    "AuditReport": "run",
    "audit": "run",
}

__all__ = [
    "DEFAULT_AGGREGATE_SAMPLES",
    "DEFAULT_CONFIDENCE",
    "DEFAULT_SAMPLES",
    "AuditError",
    "AuditReport",
    "AuditResult",
    "audit",
    "render_json",
    "render_table",
    "report_data",
]


__getattr__ = lazy_attributes(__name__, _LAZY)

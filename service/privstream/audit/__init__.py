"""Empirical privacy audit: lower bounds on the realised epsilon, through the real pipeline.

``privstream audit`` (``privstream.cli.audit``) runs ``audit``: for every noised
field, worst-case neighbouring raw values are sanitized many times by
``process_batch`` with the production noise source, and Clopper-Pearson
intervals on a family of test sets (thesis Theorem 4.1) give a lower bound
on the epsilon the release actually has; the field fails when that bound
exceeds its claim. The same for the whole record, and a self-check shows
that broken mechanisms are caught. Modules:

* ``stats``: the bounds, their confidence, the exact power computation.
* ``events``: test sets and their families.
* ``targets``: worst-case inputs per field kind.
* ``sampling``: records through the pipeline (memoized fields included).
* ``engine``: one audit (pilot, count, bound).
* ``scenarios``: the per-field and whole-record audits of a config.
* ``selfcheck``: deliberately broken mechanisms and thesis Example 4.5.
* ``run`` / ``report``: a whole run and its rendering.
"""

from privstream.audit.engine import DEFAULT_CONFIDENCE, DEFAULT_SAMPLES, AuditResult
from privstream.audit.report import render_json, render_table, report_data
from privstream.audit.run import AuditReport, audit
from privstream.errors import AuditError

__all__ = [
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

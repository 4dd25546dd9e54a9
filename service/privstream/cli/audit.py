"""``privstream audit``: an empirical lower bound on each field's realised epsilon.

For every noised field (and the whole record), worst-case neighbouring raw
values are sanitized many times by the real pipeline with the production
noise source (every aggregate: neighbouring windows, one subject in or out,
released many times by the file mode's release code); Clopper-Pearson
intervals on a family of test sets give a lower bound on the epsilon
actually realised. A field *fails* when that bound exceeds its claimed
epsilon. A self-check runs the same procedure on deliberately broken
mechanisms (the config's aggregates at half their noise among them) and on
the thesis's Example 4.5 and must see them fail. The statistics are in
``privstream.audit`` (docstrings of ``stats``, ``events``, ``engine``).

Exit codes: 0 every audit passed and the self-check came out as it must;
1 a field or the record failed, or the self-check did not catch a broken
mechanism; 2 invalid config or options.
"""

from __future__ import annotations

import argparse
import sys

from privstream.audit import (
    DEFAULT_AGGREGATE_SAMPLES,
    DEFAULT_CONFIDENCE,
    DEFAULT_SAMPLES,
    AuditError,
    audit,
    render_json,
    render_table,
)
from privstream.config import AppConfig
from privstream.pipeline import RecordPlan

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this command's options (besides --config) to its subparser."""
    parser.add_argument(
        "--samples",
        type=int,
        default=DEFAULT_SAMPLES,
        metavar="N",
        help="draws per audited input (default: %(default)s; the demo config takes well "
        "under 2 minutes on 2 cores)",
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=DEFAULT_CONFIDENCE,
        help="confidence of the whole run: a correct mechanism is reported failing with "
        "probability at most 1 - confidence (default: %(default)s)",
    )
    parser.add_argument("--format", choices=["table", "json"], default="table")
    parser.add_argument(
        "--field",
        action="append",
        metavar="NAME",
        help="audit only this field (repeatable); the whole-record audit is then skipped",
    )
    parser.add_argument(
        "--aggregate",
        action="append",
        metavar="NAME",
        help="audit only this aggregate (repeatable); the whole-record audit is then skipped, "
        "and so are the fields unless --field names some",
    )
    parser.add_argument(
        "--aggregate-samples",
        type=int,
        default=DEFAULT_AGGREGATE_SAMPLES,
        metavar="N",
        help="releases per audited window of an aggregate, at most (default: %(default)s; "
        "each is one release of every cell)",
    )
    checks = parser.add_mutually_exclusive_group()
    checks.add_argument(
        "--self-check",
        action="store_true",
        help="run only the self-check (broken mechanisms must fail, Example 4.5)",
    )
    checks.add_argument(
        "--no-self-check", action="store_true", help="skip the self-check (default: included)"
    )


def _progress(line: str) -> None:
    print(f"privstream audit: {line}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace, config: AppConfig, plan: RecordPlan) -> int:
    """Run the command; returns the exit code."""
    only_self = bool(args.self_check)
    try:
        report = audit(
            None if only_self else config,
            None if only_self else plan,
            samples=args.samples,
            confidence=args.confidence,
            fields=args.field,
            aggregates=args.aggregate,
            aggregate_samples=args.aggregate_samples,
            self_check=not args.no_self_check,
            progress=_progress,
        )
    except AuditError as exc:
        print(f"privstream: audit: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(render_json(report) if args.format == "json" else render_table(report))
    return EXIT_OK if report.passed else EXIT_FAILURE

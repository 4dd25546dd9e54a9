"""``privstream estimate``: population statistics from the sanitized records.

Reads sanitized JSON Lines (``--input``, ``-`` for stdin) or the sanitized
topic (``--topic``, read_committed, up to the end offsets at start) made
with the same config, and prints per field the debiased estimates with
standard errors and confidence intervals (table or ``--format json``),
optionally PNG plots (``--plot DIR``) and a comparison with the raw records
(``--truth FILE``). The estimators are functions of ``privstream.mechanisms``;
``privstream.estimate`` reads and reports.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from privstream.cli.avro_files import reads_avro
from privstream.cli.metadata import MetadataError, check_metadata, read_sidecar, sidecar_path
from privstream.config import AppConfig
from privstream.errors import PrivstreamError
from privstream.estimate import (
    Options,
    StreamAggregate,
    TruthAggregate,
    build_report,
    render_table,
    suppression,
)
from privstream.estimate.releases import Sink
from privstream.estimate.report import report_warnings
from privstream.estimate.source import PROGRESS_THRESHOLD, Progress, file_lines
from privstream.kinds import registration_for
from privstream.pipeline import RecordPlan
from privstream.pipeline.avro_container import json_records
from privstream.pipeline.avro_schema import hash_report_fields

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class UsageError(PrivstreamError):
    """A bad option: exit 2 with this message."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this command's options (besides --config) to its subparser."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--input",
        metavar="FILE",
        help="sanitized JSON Lines (e.g. from `privstream sanitize`); - reads stdin",
    )
    source.add_argument(
        "--topic",
        nargs="?",
        const="",
        metavar="TOPIC",
        help="read the sanitized topic instead (default: the config's kafka.output_topic), "
        "read_committed, every partition from the beginning up to the end offsets at start",
    )
    parser.add_argument(
        "--consistent",
        action="store_true",
        help="also give consistent frequencies of categorical and boolean fields (Norm-Sub: "
        "non-negative, summing to 1; biased for rare values, no intervals), JSON only",
    )
    parser.add_argument(
        "--release-metadata",
        "--metadata",
        dest="metadata",
        metavar="PATH",
        help="the release metadata of --input (default: INPUT.privstream.json, written by "
        "`privstream sanitize`, or `privstream explain --release-metadata` for a topic dump "
        "without headers); checked against --config field by field",
    )
    parser.add_argument(
        "--unchecked",
        action="store_true",
        help="read input without release metadata (or a topic's records without a "
        "privstream-config-sha256 header) anyway, with a warning: nothing then shows the "
        "records are sanitized output of this config",
    )
    parser.add_argument(
        "--candidates",
        action="append",
        default=[],
        metavar="FIELD=a,b,c",
        help="candidate values of a local_hashing field (required to estimate it) or a subset "
        "of a set field's universe; FIELD=@PATH reads one value per line; repeatable",
    )
    parser.add_argument(
        "--field",
        action="append",
        dest="fields",
        metavar="NAME",
        help="estimate only this field (repeatable; default: every released field)",
    )
    parser.add_argument(
        "--by",
        metavar="FIELD",
        help="also give every estimate per value of this released field (best a public one: "
        "a noised one groups records by their noisy value, with a warning), up to 100 groups",
    )
    parser.add_argument(
        "--bins",
        type=int,
        default=10,
        help="histogram bins over the bounds of real and integer fields (default: %(default)s)",
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="confidence level of the intervals (default: %(default)s)",
    )
    parser.add_argument("--format", choices=["table", "json"], default="table")
    parser.add_argument(
        "--plot", metavar="DIR", help="write one PNG per field into DIR (needs matplotlib)"
    )
    parser.add_argument(
        "--truth",
        metavar="FILE",
        help="the raw JSON Lines the records were made from: show the true values beside "
        "the estimates (evaluation only: the file is raw data)",
    )
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument(
        "--progress",
        action="store_true",
        default=None,
        help="always show the progress line on stderr (default: only on a terminal, for a "
        f"topic or beyond {PROGRESS_THRESHOLD:,} records)",
    )
    progress.add_argument("--no-progress", dest="progress", action="store_false")
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="topic: give up when no partition advances for this many seconds "
        "(default: %(default)s)",
    )


def _read_candidates(spec: str) -> tuple[str, tuple[str, ...]]:
    name, sep, values = spec.partition("=")
    if not sep or not name:
        raise UsageError(f"--candidates {spec!r}: write FIELD=a,b,c or FIELD=@PATH")
    if values.startswith("@"):
        try:
            text = Path(values[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise UsageError(f"--candidates {name}: cannot read {values[1:]} ({reason})") from None
        items = [line.rstrip("\r") for line in text.split("\n") if line.strip()]
    else:
        items = [item for item in values.split(",") if item != ""]
    if not items:
        raise UsageError(f"--candidates {name}: no values given")
    return name, tuple(dict.fromkeys(items))  # keep order, drop repeats


def options_from(args: argparse.Namespace, plan: RecordPlan) -> Options:
    """Check the options against the plan; UsageError names what is wrong."""
    if not 0.0 < args.confidence < 1.0:
        raise UsageError(f"--confidence {args.confidence:g} must lie strictly between 0 and 1")
    if not 1 <= args.bins <= 1000:
        raise UsageError(f"--bins {args.bins} must lie in 1..1000")
    if not args.timeout > 0:
        raise UsageError(f"--timeout {args.timeout:g} must be positive")
    by_name = {f.name: f for f in plan.fields}
    estimable = {f.name for f in plan.fields if f.handler.mechanism is not None}
    for name in args.fields or ():
        if name not in by_name:
            raise UsageError(f"--field {name}: no released field of that name in the config")
        if name not in estimable:
            raise UsageError(f"--field {name}: a public field has nothing to estimate")
    if args.by is not None and args.by not in by_name:
        raise UsageError(f"--by {args.by}: no released field of that name in the config")
    candidates: dict[str, tuple[str, ...]] = {}
    for spec in args.candidates:
        name, values = _read_candidates(spec)
        planned = by_name.get(name)
        check = registration_for(planned).candidates if planned is not None else None
        if planned is not None and check is not None:
            outside = check(planned.handler, values)
            if outside:
                raise UsageError(
                    f"--candidates {name}: {len(outside)} value(s) not in the field's domain or "
                    f"universe, e.g. {outside[0]!r}"
                )
        else:
            raise UsageError(
                f"--candidates {name}: candidates apply to local_hashing categorical and set "
                "fields; randomized-response fields estimate their whole domain"
            )
        candidates[name] = candidates.get(name, ()) + tuple(
            v for v in values if v not in candidates.get(name, ())
        )
    return Options(
        bins=args.bins,
        confidence=args.confidence,
        candidates=candidates,
        consistent=args.consistent,
    )


def _counted(lines: Iterable[bytes], progress: Progress) -> Iterator[bytes]:
    count = 0
    for line in lines:
        count += 1
        if count % 1024 == 0:
            progress.update(count)
        yield line
    progress.update(count)


def _read_file(
    path: str, plan: RecordPlan, stream: StreamAggregate, progress: Progress
) -> dict[str, Any]:
    """JSON Lines, or an Avro container file (``sanitize --output-format avro``) by its magic."""
    with contextlib.ExitStack() as stack:
        handle = sys.stdin.buffer if path == "-" else stack.enter_context(open(path, "rb"))
        name = "stdin" if path == "-" else path
        records = file_lines(handle)
        if reads_avro("auto", handle):
            records = json_records(handle, name, hash_report_fields(plan))
        stream.consume(_counted(records, progress))
    return {"type": "file", "path": name}


def _read_topic(
    config: AppConfig, plan: RecordPlan, topic: str, stream: StreamAggregate, args: Any
) -> dict[str, Any]:
    from privstream.estimate.source import run_topic_read

    kafka = config.needs_kafka("estimate --topic")
    progress = Progress(enabled=args.progress, threshold=0)
    sink: Sink = stream.add
    registry = kafka.schema_registry
    if kafka.avro_output and registry is not None:  # read through the registry
        from privstream.cli.avro_topic import AvroValues

        sink = AvroValues(registry, plan, stream.add, stream.skip).add
    elif kafka.output_encoding != "json" and registry is not None:  # Protobuf, JSON Schema
        from privstream.cli.framed_topic import FramedValues

        sink = FramedValues(registry, config, plan, stream.add, stream.skip).add
    try:
        read = run_topic_read(
            kafka,
            topic,
            sink,
            expected_config=plan.config_sha256,
            expected_release=plan.release_sha256,
            expected_fields={a.name: plan.field_releases[a.name] for a in stream.fields},
            skip=stream.skip,
            environ=os.environ,
            progress=progress,
            idle_timeout=args.timeout,
        )
    finally:
        progress.finish()
    stream.flush()
    return {
        "type": "topic",
        "topic": topic,
        "bootstrap_servers": kafka.bootstrap_servers,
        "partitions": read.partitions,
        "offsets_at_start": read.expected,
        "records_without_config_header": read.without_config_header,
        "records_read": read.records,
        "other_config": read.other_config,
        "ledger": suppression.summary(read.ledger_counts.values()),
        "refused": {
            name: {"records": read.field_mismatch[name], "reason": reason}
            for name, reason in sorted(read.field_reasons.items())
        },
    }


def check_file_input(
    path: str, metadata: str | None, plan: RecordPlan, unchecked: bool
) -> tuple[str | None, dict[str, str]]:
    """The checked metadata path of a file input (None when ``unchecked`` lets it be
    missing), and the fields it released otherwise (``name -> reason``: refused).

    MetadataError (exit 2) when version-1 metadata names another config, or
    metadata is missing without ``unchecked``: the input may be raw records
    or another release, and its estimates would look plausible and be wrong.
    """
    where = metadata or (sidecar_path(path) if path != "-" else None)
    if where is None or not os.path.exists(where):
        found = (
            "stdin has no release metadata (pass --metadata PATH)"
            if where is None
            else f"no release metadata at {where}"
        )
        if not unchecked:
            raise MetadataError(
                f"{found}: nothing shows {path if path != '-' else 'stdin'} is sanitized output "
                "of this config (raw records would give confident nonsense); pass the sidecar "
                "`privstream sanitize` wrote (--metadata PATH), or --unchecked to read it anyway"
            )
        print(
            f"privstream: estimate: warning: {found}; reading it unchecked (--unchecked): "
            "the estimates are meaningful only if it is sanitized output of this config",
            file=sys.stderr,
        )
        return None, {}
    return where, check_metadata(read_sidecar(where), plan, where)


def check_topic_read(
    source: dict[str, Any], skipped: dict[str, int], plan: RecordPlan, unchecked: bool
) -> None:
    """Refuse a topic read with no record of this config, or records without the header.

    Records of another config are skipped (a topic may hold several releases
    after a config change); when nothing but those was read, or records
    carry no ``privstream-config-sha256`` header (not privstream's output)
    and ``unchecked`` is off, MetadataError (exit 2).
    """
    mismatched = skipped.get("config_mismatch", 0)
    without = source.get("records_without_config_header", 0)
    matched = source.get("records_read", 0) - without
    if mismatched and not matched and not without:
        raise MetadataError(
            f"topic {source['topic']}: all {mismatched:,} records carry another config's "
            f"privstream-config-sha256 (e.g. {source.get('other_config')}); --config has "
            f"{plan.config_sha256}: pass the config the topic was sanitized with"
        )
    if without and not unchecked:
        raise MetadataError(
            f"topic {source['topic']}: {without:,} records have no privstream-config-sha256 "
            "header: they are not privstream's sanitized output (raw records would give "
            "confident nonsense); pass --unchecked to read them anyway"
        )
    if without:
        print(
            f"privstream: estimate: warning: {without:,} records without a "
            "privstream-config-sha256 header read unchecked (--unchecked)",
            file=sys.stderr,
        )


def _finite(value: Any) -> Any:
    """The report with every non-finite float as null: JSON has no NaN or infinity, and
    bounds near the double range give infinite worst-case errors."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def _estimated(plan: RecordPlan, args: argparse.Namespace, refused: dict[str, str]) -> list[str]:
    """The fields to estimate: those asked for (or all), less those the input released
    otherwise; MetadataError when one asked for by ``--field`` is refused, or none is left."""
    asked = args.fields or [f.name for f in plan.fields if f.handler.mechanism is not None]
    for name in args.fields or ():
        if name in refused:
            raise MetadataError(f"--field {name} is refused: {refused[name]}")
    kept = [name for name in asked if name not in refused]
    if not kept:
        raise MetadataError(
            "every field of --config was released otherwise in the input: "
            + "; ".join(f"{name}: {why}" for name, why in refused.items())
        )
    return kept


def _warn_refused(source: dict[str, Any]) -> None:
    for name, refusal in source.get("refused", {}).items():
        records = refusal.get("records")
        count = f" in {records:,} records" if records else ""
        print(
            f"privstream: estimate: warning: field {name} refused{count}: {refusal['reason']}",
            file=sys.stderr,
        )


def _aggregate(
    plan: RecordPlan, options: Options, fields: list[str] | None, by: str | None
) -> StreamAggregate:
    if by is None:
        return StreamAggregate(plan, options, fields)
    from privstream.estimate.groups import GroupedAggregate

    return GroupedAggregate(plan, options, fields, by)


def _read(
    args: argparse.Namespace, config: AppConfig, plan: RecordPlan, options: Options
) -> tuple[StreamAggregate, dict[str, Any]]:
    """Check and read the input; MetadataError when it is refused."""
    if args.topic is not None:
        stream = _aggregate(plan, options, args.fields, args.by)
        topic = args.topic or config.needs_kafka("estimate --topic").output_topic
        source = _read_topic(config, plan, topic, stream, args)
        check_topic_read(source, stream.skipped, plan, args.unchecked)
        return stream, source
    checked, refused = check_file_input(args.input, args.metadata, plan, args.unchecked)
    if args.by in refused:
        raise MetadataError(f"--by {args.by} is refused: {refused[args.by]}")
    stream = _aggregate(plan, options, _estimated(plan, args, refused), args.by)
    progress = Progress(enabled=args.progress)
    try:
        source = _read_file(args.input, plan, stream, progress)
    finally:
        progress.finish()
    if checked is not None:
        _check_count(read_sidecar(checked).get("records"), stream.records, checked)
    source["metadata"] = checked
    source["refused"] = {name: {"reason": why} for name, why in refused.items()}
    return stream, source


def _check_count(named: object, read: int, where: str) -> None:
    """Warn unless the file holds the records its metadata names: records appended after the
    release (another run's, another calibration's) would be estimated under its parameters."""
    if isinstance(named, int) and named != read:
        print(
            f"privstream: estimate: warning: the input holds {read:,} records and its release "
            f"metadata {where} names {named:,}: records added to the file after its release are "
            "estimated under that release's calibration; estimate the file sanitize wrote as it is",
            file=sys.stderr,
        )


def run(args: argparse.Namespace, config: AppConfig, plan: RecordPlan) -> int:
    """Run the command; returns the exit code."""
    try:
        options = options_from(args, plan)
    except UsageError as exc:
        print(f"privstream: estimate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.plot:
        from privstream.estimate.plots import MISSING_MATPLOTLIB, matplotlib_available

        if not matplotlib_available():
            print(f"privstream: estimate: {MISSING_MATPLOTLIB}", file=sys.stderr)
            return EXIT_USAGE
    try:
        stream, source = _read(args, config, plan, options)
    except MetadataError as exc:
        print(f"privstream: estimate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _warn_refused(source)
    truth = None
    if args.truth:
        truth = TruthAggregate(plan, stream)
        with open(args.truth, "rb") as handle:
            truth.consume(file_lines(handle))
    report = build_report(stream, source, options, truth, args.truth)
    for warning in report_warnings(report):
        print(f"privstream: estimate: warning: {warning}", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(_finite(report), indent=2, allow_nan=False))
    else:
        print(render_table(report))
    if args.plot:
        from privstream.estimate.plots import write_plots

        plotted = write_plots(report, args.plot)
        print(
            f"privstream estimate: {len(plotted.written)} plot(s) written to {args.plot}",
            file=sys.stderr,
        )
        for name, reason in plotted.reasons.items():
            print(f"privstream estimate: no plot for field {name}: {reason}", file=sys.stderr)
    if stream.records == 0:
        where = source.get("topic") or source.get("path")
        print(f"privstream: estimate: no sanitized records read from {where}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK

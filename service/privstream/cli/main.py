"""The ``privstream`` command: run | sanitize | explain | topics | estimate | audit | ....

Exit codes: 0 success, 1 runtime failure, 2 invalid config or usage.

Start-up and the cyclic garbage collector
-----------------------------------------
Start-up (imports of numpy, pydantic and the config models, building the
plan) allocates a few hundred thousand long-lived objects, and the cyclic
collector scans them again and again: during the imports, at every full
collection of a run, and at exit. When ``main`` owns the process (called
without ``argv``, as the ``privstream`` command and ``python -m`` do), it
pauses the collector until the plan is built and, for ``sanitize``, then
freezes what start-up made (``gc.freeze``: moved to a generation the collector
never scans; none of it is garbage, it lives until exit). Collection of
everything made afterwards is unchanged. Measured with callgrind on the
reference config: an empty file's run 1.55 G instructions before, 1.46 G
after; 360 fewer instructions a record (docs/benchmarks.md). Called with
``argv`` (tests, embedding), or with the collector already off, ``main``
leaves the collector alone.

Pydantic plugins
----------------
pydantic looks for plugins (``importlib.metadata`` entry points of the
``pydantic`` group) when it builds the first model: importing
``importlib.metadata`` and scanning every installed distribution took 109 M
instructions, about 20 ms, of every start-up. The config models are
privstream's own and no plugin has a use for them, so when ``main`` owns
the process it puts a plugin loader that finds none in the place of
pydantic's (``_no_pydantic_plugins``) before pydantic is imported. Called
with ``argv`` (tests, embedding), pydantic stays as the caller has it.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import sys
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING

from privstream import __version__
from privstream.errors import (
    ChangelogError,
    ConfigError,
    MechanismError,
    OutputSchemaError,
    PrivstreamError,
    SecretError,
    TopicError,
)

if TYPE_CHECKING:
    from privstream.config import AppConfig
    from privstream.pipeline import RecordPlan

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG = 0, 1, 2
#: ``sanitize``'s default limit on the dead-lettered share of a run's records; the
#: worker's PrivstreamDeadLetterRateHigh alert (deploy/prometheus/rules.yml) uses the same
DEFAULT_MAX_DEAD_LETTER_SHARE = 0.01


def _share(text: str) -> float:
    """A share between 0 and 1 (argparse type)."""
    try:
        share = float(text)
    except ValueError:
        share = math.nan
    if not 0.0 <= share <= 1.0:  # also NaN
        raise argparse.ArgumentTypeError(f"{text!r} is not a share between 0 and 1 (0.01 = 1%)")
    return share


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="privstream", description="Differential-privacy sanitizer for Kafka streams."
    )
    parser.add_argument("--version", action="version", version=f"privstream {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="consume, sanitize and produce records on Kafka")
    run.add_argument("--config", required=True, help="YAML config file")
    run.add_argument("--http-port", type=int, help="override http.port (0 = any free port)")
    run.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    run.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="json: one object per line with the keys ts, level, logger, message "
        "(default: %(default)s)",
    )
    run.add_argument(
        "--noise-key-file",
        help="file holding the noise key as hex (default: $PRIVSTREAM_NOISE_KEY_FILE, "
        "else $PRIVSTREAM_NOISE_KEY); make one with `privstream keygen`",
    )
    run.add_argument(
        "--insecure-ephemeral-key",
        action="store_true",
        help="without a key, draw a random one for this process: replays after a restart "
        "get fresh noise (experiments only)",
    )
    run.add_argument(
        "--replica-id",
        help="stable, unique name of this replica; the transactional id is derived from it "
        "(default: $PRIVSTREAM_REPLICA_ID, else the host name)",
    )

    san = sub.add_parser("sanitize", help="sanitize a JSON Lines or Avro container file (no Kafka)")
    san.add_argument("--config", required=True, help="YAML config file")
    san.add_argument("--input", help="JSON Lines or Avro container file (default: stdin)")
    san.add_argument("--output", help="sanitized output (default: stdout)")
    san.add_argument(
        "--input-format",
        choices=["auto", "json", "avro"],
        default="auto",
        help="json: JSON Lines; avro: an Avro Object Container File; auto: Avro if the "
        "input starts with the container magic Obj\\x01, else JSON Lines (default: %(default)s)",
    )
    san.add_argument(
        "--output-format",
        choices=["json", "avro"],
        default="json",
        help="json: JSON Lines; avro: an Avro container file of the schema derived from the "
        "config (docs/avro.md) (default: %(default)s, whatever the input)",
    )
    san.add_argument(
        "--dead-letter",
        default="privstream-dead-letters.jsonl",
        help="where unsanitizable lines go, with line number and reason; holds raw data "
        "(default: %(default)s, created only if needed)",
    )
    san.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --output (a second release of the same records adds "
        "epsilon: only for an output never shared) and --dead-letter file",
    )
    san.add_argument(
        "--max-dead-letter-share",
        type=_share,
        default=DEFAULT_MAX_DEAD_LETTER_SHARE,
        metavar="SHARE",
        help="exit 1 when more than this share of the records is dead-lettered, with a "
        "summary by reason; the output is written all the same (default: %(default)s)",
    )
    san.add_argument(
        "--aggregates-output",
        metavar="PATH",
        help="where the config's aggregates over the whole file go, one JSON row per "
        "(aggregate, group); required when the config has aggregates (docs/aggregates.md)",
    )
    san.add_argument(
        "--metadata",
        metavar="PATH",
        help="where the release metadata goes (config hash, epsilon, delta, each field's "
        "parameters; read by `privstream estimate`) (default: OUTPUT.privstream.json; "
        "none when writing to stdout)",
    )

    exp = sub.add_parser("explain", help="show each field's mechanism and guarantee")
    exp.add_argument("--config", required=True, help="YAML config file")
    exp.add_argument("--format", choices=["table", "json"], default="table")
    exp.add_argument(
        "--wide",
        action="store_true",
        help="one line per field, however wide (default: the table fits in 100 columns, "
        "each field's params on indented lines under its row when needed)",
    )
    exp.add_argument(
        "--release-metadata",
        metavar="FILE",
        help="also write the release metadata of this config as this privstream calibrates it "
        "(what `run` releases): keep it beside a topic dump without headers, for "
        "`estimate --release-metadata`",
    )

    top = sub.add_parser("topics", help="create or check the topics a config needs")
    sub.add_parser("keygen", help="print a fresh noise key (hex) for --noise-key-file")
    sub.add_parser("schema", help="print the config's JSON Schema (for editors and CI checks)")

    est = sub.add_parser(
        "estimate", help="population statistics from sanitized records (debiased, with CIs)"
    )
    est.add_argument("--config", required=True, help="YAML config the records were made with")
    aud = sub.add_parser("audit", help="empirical lower bound on each field's realised epsilon")
    aud.add_argument("--config", required=True, help="YAML config file")
    # their modules take a tenth of a second to import: only for their own command (or help)
    if command in (None, "estimate"):
        from privstream.cli import estimate

        estimate.configure(est)
    if command in (None, "topics"):
        from privstream.cli import topics

        topics.configure(top)
    if command in (None, "audit"):
        from privstream.cli import audit

        audit.configure(aud)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the top level has no option taking a value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def _load(path: str) -> tuple[AppConfig, RecordPlan]:
    """The config and its plan; building the plan checks every mechanism's parameters."""
    # imported here, not at the top: after ``main`` has paused the collector
    from privstream.config import load_config
    from privstream.kinds import build_plan

    try:
        config = load_config(path)
        plan = build_plan(config)
        if config.aggregates:  # every aggregate's noise is calibrated here, or exit 2
            from privstream.aggregates import build_aggregates

            try:
                build_aggregates(config)
            except MechanismError as exc:
                raise ConfigError([str(exc)]) from None
        return config, plan
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"privstream: config error: {problem}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None


def _needs_kafka(config: AppConfig, command: str) -> None:
    """Exit 2 before anything starts when a broker command's config has no kafka section."""
    try:
        config.needs_kafka(command)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"privstream: config error: {problem}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None


#: the module pydantic imports its plugin loader from (``pydantic.plugin._schema_validator``)
_PYDANTIC_PLUGIN_LOADER = "pydantic.plugin._loader"


def _no_pydantic_plugins() -> None:
    """A stand-in for pydantic's plugin loader that finds no plugin (module docstring).

    Only before pydantic has loaded its own loader: a process that already has
    it keeps it.
    """
    if _PYDANTIC_PLUGIN_LOADER in sys.modules:
        return
    loader = types.ModuleType(_PYDANTIC_PLUGIN_LOADER, "privstream: no pydantic plugins")
    vars(loader)["get_plugins"] = tuple  # get_plugins() -> (): no plugin
    sys.modules[_PYDANTIC_PLUGIN_LOADER] = loader


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; without ``argv`` (the process's own), it also tunes the collector
    and leaves pydantic's plugins out."""
    if argv is not None:
        return _main(argv, owns_process=False)
    _no_pydantic_plugins()
    if not gc.isenabled():  # the caller turned it off: its choice, left alone
        return _main(sys.argv[1:], owns_process=False)
    gc.disable()  # until the plan is built (module docstring)
    try:
        return _main(sys.argv[1:], owns_process=True)
    finally:
        gc.enable()  # also when start-up failed


def _startup_done(command: str, owns_process: bool) -> None:
    """Start-up is over: freeze its objects for ``sanitize``, collect again as usual."""
    if owns_process:
        if command == "sanitize":
            gc.freeze()
        gc.enable()


def _main(argv: Sequence[str], owns_process: bool) -> int:
    args = _parser(_command(argv)).parse_args(argv)
    if args.command == "keygen":
        from privstream.config.runtime import keygen

        print(keygen())
        return EXIT_OK
    if args.command == "schema":
        import json

        from privstream.config.schema import config_schema

        print(json.dumps(config_schema(), indent=2))
        return EXIT_OK
    if args.command in ("sanitize", "run"):
        from privstream.cli.allocator import tune_allocator

        tune_allocator()
    config, plan = _load(args.config)
    if args.command in ("run", "topics"):
        _needs_kafka(config, args.command if args.command == "run" else f"topics {args.action}")
    if args.command != "sanitize":
        _startup_done(args.command, owns_process)
    try:
        if args.command == "explain":
            from privstream.cli.explain import TABLE_WIDTH, explain

            print(explain(config, plan, args.format, None if args.wide else TABLE_WIDTH))
            if args.release_metadata:
                from privstream.cli.metadata import write_sidecar

                write_sidecar(args.release_metadata, plan, None, written_by="explain")
        elif args.command == "sanitize":
            from privstream.cli.aggregates_file import check_aggregates_output, file_aggregates
            from privstream.cli.metadata import MetadataError, metadata_target
            from privstream.cli.release_files import (
                FilePathError,
                FilePaths,
                check_paths,
                exit_cleanly_on_sigterm,
            )
            from privstream.cli.sanitize import (
                FileModeError,
                check_file_mode,
                file_output,
                run_sanitize,
            )
            from privstream.pipeline.noise import KernelSeededAes

            try:  # a usage error: refused before any output is written
                check_file_mode(config)
                paths = FilePaths(
                    args.input,
                    args.output,
                    args.dead_letter,
                    metadata_target(args.metadata, args.input, args.output, args.dead_letter),
                    args.overwrite,
                    args.aggregates_output,
                )
                check_aggregates_output(config, paths.aggregates)
                check_paths(paths)
                aggregates = file_aggregates(config)
                output = file_output(args.output_format, config, plan)
            except (
                FilePathError,
                FileModeError,
                MetadataError,
                MechanismError,
                OutputSchemaError,
            ) as exc:
                print(f"privstream: {exc}", file=sys.stderr)
                return EXIT_CONFIG

            if any(f.memo is not None for f in plan.fields):
                print(
                    "privstream: warning: sanitize has no noise key (and files no message "
                    "keys), so memoized fields get fresh noise on every line (each report is "
                    "a new release)",
                    file=sys.stderr,
                )
            from privstream.cli.explain import declared_warnings

            for warning in declared_warnings(config, plan):
                print(f"privstream: WARNING: {warning}", file=sys.stderr)
            _startup_done(args.command, owns_process)
            if owns_process:
                exit_cleanly_on_sigterm()
            summary = run_sanitize(
                plan,
                paths,
                KernelSeededAes(),
                aggregates,
                input_format=args.input_format,
                output=output,
            )
            print(summary.render(args.dead_letter), file=sys.stderr)
            if paths.metadata is None:
                print(
                    "privstream: note: output on stdout has no release metadata; "
                    "`privstream estimate` then needs one: write it with --metadata PATH",
                    file=sys.stderr,
                )
            if summary.share > args.max_dead_letter_share:
                report = summary.share_report(
                    args.max_dead_letter_share, args.output, args.dead_letter
                )
                print(report, file=sys.stderr)
                return EXIT_FAILURE
        elif args.command == "estimate":
            from privstream.cli import estimate

            return estimate.run(args, config, plan)
        elif args.command == "topics":
            from privstream.cli import topics

            return topics.run(args, config)
        elif args.command == "audit":
            from privstream.cli import audit

            return audit.run(args, config, plan)
        else:
            return _run(config, plan, args)
    except ConfigError as exc:  # a setting a command needs (estimate --topic: kafka)
        for problem in exc.problems:
            print(f"privstream: config error: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    except PrivstreamError as exc:
        print(f"privstream: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except BrokenPipeError:  # `privstream explain | head`: the reader has what it wanted
        _quiet_stdout()
        return EXIT_FAILURE
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"privstream: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's last flush of what is still buffered
    would hit the closed pipe again and print a traceback (Python's docs, SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _run(config: AppConfig, plan: RecordPlan, args: argparse.Namespace) -> int:
    from privstream.config.aggregates import stream_problems

    transactions = config.kafka is None or config.kafka.transactions
    ledger = config.privacy.ledger
    input_format = "json" if config.kafka is None else config.kafka.format
    time = None if ledger is None else ledger.time
    aggregates = config.aggregates
    problems = stream_problems(aggregates, transactions, ledger is not None, input_format, time)
    if not problems and config.aggregates and config.kafka is not None:
        from privstream.aggregates import build_aggregates, record_problems

        limit = config.kafka.max_message_bytes
        problems = record_problems(build_aggregates(config), limit)
    for problem in problems:  # refused rather than silently not answered
        print(f"privstream: config error: {problem}", file=sys.stderr)
    if problems:
        return EXIT_CONFIG
    import asyncio  # imported here: a tenth of a second that the other commands never need
    import logging

    from privstream.cli import logs
    from privstream.cli.run import serve
    from privstream.config.runtime import load_runtime

    logs.configure(args.log_level, args.log_format)
    from privstream.cli.explain import declared_warnings

    for warning in declared_warnings(config, plan):
        logging.getLogger("privstream").warning("%s", warning)
    try:
        runtime = load_runtime(
            config.needs_kafka("run"),
            os.environ,
            key_file=args.noise_key_file,
            insecure_ephemeral_key=args.insecure_ephemeral_key,
            replica_id=args.replica_id,
        )
    except SecretError as exc:
        _last_words(exc, args.log_format)
        return EXIT_CONFIG
    try:
        asyncio.run(serve(config, plan, runtime, args.http_port))
    except (TopicError, ChangelogError, OutputSchemaError) as exc:  # before any record
        _last_words(exc, args.log_format)
        return EXIT_CONFIG
    return EXIT_OK


def _last_words(exc: Exception, log_format: str) -> None:
    """Why ``run`` exits 2: a JSON line like every other in ``--log-format json``."""
    if log_format == "json":
        import logging

        logging.getLogger("privstream").error("%s", exc)
    else:
        print(f"privstream: {exc}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())

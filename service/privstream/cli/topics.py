"""``privstream topics create | check``: the topics a config needs, made or verified.

Both go by the rules the worker checks at start-up (``worker.topic_plan``,
through ``worker.topics.survey``): what ``check`` calls a problem stops a
worker with exit 2, what it calls a note the worker logs as a WARNING.
``create`` makes what is missing (the input needs ``--partitions`` the first
time; every other topic takes the input's partition count and replication)
and then reports like ``check``. It never alters a topic that exists.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import TYPE_CHECKING

from aiokafka.errors import KafkaError

from privstream.config.runtime import load_credentials
from privstream.errors import SecretError, TopicError
from privstream.worker.changelog import changelog_topic
from privstream.worker.restart import describe
from privstream.worker.topics import Survey, create, create_changelog, open_admin, survey

if TYPE_CHECKING:
    from aiokafka.admin import AIOKafkaAdminClient

    from privstream.config import AppConfig, KafkaConfig
    from privstream.config.runtime import Credentials

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG = 0, 1, 2
#: replicas of a new input topic when neither --replication-factor nor the input says
MAX_DEFAULT_REPLICATION = 3


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    create_parser = actions.add_parser(
        "create", help="create the missing topics (never alters one that exists), then check"
    )
    check_parser = actions.add_parser(
        "check", help="verify the topics as the worker does at start-up (exit 2 on a problem)"
    )
    for sub in (create_parser, check_parser):
        sub.add_argument("--config", required=True, help="YAML config file")
    create_parser.add_argument(
        "--partitions",
        type=_positive,
        help="partition count of the input topic when it does not exist yet (an existing "
        "input keeps its own; the other topics always take the input's)",
    )
    create_parser.add_argument(
        "--replication-factor",
        type=_positive,
        help="replicas of each new topic (default: the input's, else min(3, brokers))",
    )
    create_parser.add_argument(
        "--check", action="store_true", help="create nothing: the same as `topics check`"
    )


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def run(args: argparse.Namespace, config: AppConfig) -> int:
    """Run ``topics create`` or ``topics check``; returns the exit code."""
    kafka = config.needs_kafka(f"topics {args.action}")
    try:
        credentials = load_credentials(kafka, os.environ)
    except SecretError as exc:
        print(f"privstream: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    changelog = None if config.privacy.ledger is None else changelog_topic(config)
    # aiokafka's own lines (no logging is set up: Python's last-resort handler would print
    # each) add nothing to the one line said here when the broker does not answer
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    creating = args.action == "create" and not args.check
    try:
        return asyncio.run(_topics(kafka, credentials, changelog, args if creating else None))
    except TopicError as exc:  # a changelog it must not re-create, an input without a size
        print(f"privstream: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (KafkaError, OSError) as exc:  # the broker: unreachable, or refusing this client
        print(
            f"privstream: topics: the broker at {kafka.bootstrap_servers} did not answer or "
            f"refused ({describe(exc)}); check kafka.bootstrap_servers and "
            "kafka.security, and that this client may describe and create topics (ACLs)",
            file=sys.stderr,
        )
        return EXIT_FAILURE


async def _topics(
    kafka: KafkaConfig,
    credentials: Credentials | None,
    changelog: str | None,
    create_args: argparse.Namespace | None,
) -> int:
    admin = await open_admin(kafka, credentials)
    try:
        if create_args is not None:
            await _create_missing(admin, kafka, changelog, create_args)
        return _report(await survey(admin, kafka, changelog))
    finally:
        await admin.close()


async def _create_missing(
    admin: AIOKafkaAdminClient, kafka: KafkaConfig, changelog: str | None, args: argparse.Namespace
) -> None:
    before = await survey(admin, kafka, changelog)
    source = before.source
    replication = args.replication_factor or (source.replication if source else None)
    replication = replication or min(MAX_DEFAULT_REPLICATION, await _brokers(admin))
    if source is None:
        if args.partitions is None:
            raise TopicError(
                f"input topic {kafka.input_topic!r} does not exist and has no partition count "
                "to create it with: give --partitions N (the output, dead-letter and changelog "
                "topics take the same count)"
            )
        await create(admin, before.specs[0], args.partitions, replication)
        print(f"created input topic {kafka.input_topic} ({args.partitions} partitions)")
    elif args.partitions is not None and args.partitions != source.partitions:
        print(
            f"privstream: note: input topic {kafka.input_topic!r} exists with "
            f"{source.partitions} partitions; --partitions {args.partitions} is not applied "
            "(the other topics follow the input)",
            file=sys.stderr,
        )
    await _create_the_rest(admin, kafka, changelog, replication)


async def _create_the_rest(
    admin: AIOKafkaAdminClient, kafka: KafkaConfig, changelog: str | None, replication: int
) -> None:
    now = await survey(admin, kafka, changelog)
    source = now.source
    if source is None:  # listed when created, gone since: deleted meanwhile
        raise TopicError(f"input topic {kafka.input_topic!r} disappeared: run it again")
    for spec in now.missing:
        if spec.role == "changelog":
            await create_changelog(admin, kafka, spec, source, replication)
        else:
            await create(admin, spec, source.partitions, replication)
        print(f"created {spec.role} topic {spec.name} ({source.partitions} partitions)")


async def _brokers(admin: AIOKafkaAdminClient) -> int:
    cluster = await admin.describe_cluster()
    return max(1, len(cluster["brokers"]))


def _report(found: Survey) -> int:
    """One line per topic on stdout, problems and notes on stderr; 2 if a worker would stop."""
    width = max(len(spec.name) for spec in found.specs)
    for spec in found.specs:
        shape = found.found[spec.name]
        state = (
            "missing"
            if shape is None
            else f"{shape.partitions} partitions, replication {shape.replication}"
        )
        print(f"{spec.role:<12} {spec.name:<{width}}  {state}")
    absent = [spec for spec in found.missing if spec.role != "changelog"]
    for spec in absent:
        print(
            f"privstream: {spec.role} topic {spec.name!r} does not exist: create it with "
            "`privstream topics create --config <this config> --partitions N`",
            file=sys.stderr,
        )
    if any(spec.role == "changelog" for spec in found.missing):
        print(
            "privstream: note: the ledger changelog does not exist yet: the worker (or "
            "`privstream topics create`) creates it like the input",
            file=sys.stderr,
        )
    for problem in found.problems:
        print(f"privstream: {problem}", file=sys.stderr)
    for note in found.notes:
        print(f"privstream: note: {note}", file=sys.stderr)
    if absent or found.problems:
        print("privstream: topics: a worker would refuse to start (exit 2)", file=sys.stderr)
        return EXIT_CONFIG
    return EXIT_OK

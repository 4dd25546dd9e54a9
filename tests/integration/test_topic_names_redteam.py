"""Red team: topic names the loader accepts but Kafka refuses: the worker retries its
session for ever (a WARNING with InvalidTopicError every few seconds, never ready),
instead of exiting 2 with a clear error.

The loader takes any non-empty topic name. An input topic of 240 characters is a
valid Kafka name (at most 249), but the ledger's default changelog name adds
``-privstream-ledger`` (18): 258 characters, which the broker refuses to create
(``InvalidTopicException``) in ``topics._create``. A name with a space is no Kafka
name at all. Either should be refused at config load (exit 2, naming the setting),
or at least by ``check_topics`` with a message, never retried for ever.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.broker import create_topics
from tests.support.ledger import body
from tests.support.worker_proc import WorkerProcess, unique_topics, write_config


async def test_a_changelog_name_too_long_for_kafka_is_a_clear_error(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    kafka = unique_topics("long")
    kafka["input_topic"] = kafka["input_topic"] + "x" * (240 - len(kafka["input_topic"]))
    topics = [kafka["input_topic"], kafka["output_topic"], kafka["dead_letter_topic"]]
    await create_topics(kafka_bootstrap, topics, 2)
    config = write_config(tmp_path / "c.yaml", kafka_bootstrap, kafka, body())
    worker = WorkerProcess(config, tmp_path / "worker.log")
    await worker.start()
    code = await worker.wait(within_s=90)
    log = worker.log_text()
    assert code == 2, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert "changelog" in log, log[-3000:]

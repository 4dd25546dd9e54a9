"""Avro output under a real schema registry, a real worker and broker (issue 33).

Avro in gives Avro out by default: the sanitized records are framed with the id
of the schema derived from the config, registered under ``<output_topic>-value``
with BACKWARD compatibility. They are read back here as an analyst would, with
confluent-kafka's ``AvroDeserializer``, and by ``privstream estimate --topic``.
A restart with the same config reuses the schema id; a config whose schema
would break the old records' readers is refused at start-up.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from tests.integration.test_avro_input import V1, reading
from tests.support.avro import (
    AvroDeserializer,
    MessageField,
    SchemaRegistryClient,
    SerializationContext,
    avro_writer,
)
from tests.support.broker import REPO_ROOT, create_topics
from tests.support.faults import fault_topics, free_port, poll_until, readiness_becomes
from tests.support.http_get import http_get
from tests.support.registry import Registry
from tests.support.worker_proc import (
    PRIVACY,
    Collector,
    WorkerProcess,
    produce,
    read_all,
    started,
    unique_topics,
    wait_while_alive,
    write_config,
)

#: the output fields of PRIVACY (device_id is dropped)
RELEASED = {"seq", "salary", "state", "opted_in"}


def avro_config(
    path: Path, bootstrap: str, kafka: dict[str, str], url: str, privacy: dict[str, Any]
) -> Path:
    settings = {**kafka, "format": "avro", "schema_registry": {"url": url}}
    return write_config(path, bootstrap, settings, privacy)


async def topics_with_input(
    bootstrap: str, url: str, prefix: str, seqs: range
) -> tuple[dict[str, str], list[bytes]]:
    kafka = unique_topics(prefix)
    await create_topics(bootstrap, list(kafka.values()), partitions=1)
    with SchemaRegistryClient({"url": url}) as client:
        write = avro_writer(client, kafka["input_topic"], V1)
        return kafka, [write(reading(s)) for s in seqs]


def read_back(url: str, topic: str, values: list[bytes]) -> list[dict[str, Any]]:
    """The values as confluent-kafka's deserializer reads them (writer schema by id)."""
    context = SerializationContext(topic, MessageField.VALUE)
    with SchemaRegistryClient({"url": url}) as client:
        deserializer = AvroDeserializer(client)
        return [deserializer(value, context) for value in values]


async def estimate_topic(config: Path) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "privstream.cli.main",
        "estimate",
        "--config",
        str(config),
        "--topic",
        "--format",
        "json",
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    report: dict[str, Any] = json.loads(out)
    return report


async def test_avro_output_reads_back_with_a_standard_deserializer_and_estimates(
    kafka_bootstrap: str, schema_registry: str, tmp_path: Path
) -> None:
    """Every good record comes out once as Avro of the derived schema (registered BACKWARD
    under <output_topic>-value), with the config's fields only and the categorical as its
    domain; a poison value is dead-lettered with its bytes as received; ``estimate
    --topic`` reads the Avro records through the registry."""
    url = schema_registry
    kafka, values = await topics_with_input(kafka_bootstrap, url, "avro-out", range(60))
    poison = b'{"seq": 99}'
    await produce(kafka_bootstrap, kafka["input_topic"], [(b"k", v, []) for v in [*values, poison]])
    config = avro_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, url, PRIVACY)
    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with (
        Collector(kafka_bootstrap, kafka["output_topic"]) as out,
        Collector(kafka_bootstrap, kafka["dead_letter_topic"]) as dead,
        started(worker),
    ):
        await wait_while_alive(out, 60, worker, within_s=120)
        await wait_while_alive(dead, 1, worker, within_s=60)
        assert await worker.terminate() == 0, worker.log_text()[-3000:]

    subject = f"{kafka['output_topic']}-value"
    with SchemaRegistryClient({"url": url}) as client:
        latest = client.get_latest_version(subject)
        compatibility = client.get_compatibility(subject)
    assert compatibility == "BACKWARD"
    assert {int.from_bytes(r.value[1:5], "big") for r in out.records} == {latest.schema_id}
    records = read_back(url, kafka["output_topic"], [r.value for r in out.records])
    assert sorted(r["seq"] for r in records) == list(range(60))
    assert {frozenset(r) for r in records} == {frozenset(RELEASED)}
    assert {r["state"] for r in records} <= {"TX", "CA", "NY"}
    assert all(isinstance(r["salary"], float) and isinstance(r["opted_in"], bool) for r in records)
    assert [r.value for r in dead.records] == [poison]
    assert dict(dead.records[0].headers)["privstream-reason"] == b"avro_no_magic_byte"

    report = await estimate_topic(config)
    assert report["records_read"] == 60 and report["records_skipped"] == {}
    fields = {f["name"]: f for f in report["fields"]}
    assert {e["value"] for e in fields["state"]["frequencies"]} == {"TX", "CA", "NY"}


async def test_a_restart_reuses_the_schema_id_and_an_incompatible_config_is_refused(
    kafka_bootstrap: str, schema_registry: str, tmp_path: Path
) -> None:
    """The same config twice: one schema version, one id in every output. Then a config
    that drops a domain value of ``state`` (old records hold it, new readers could not
    read them): the worker exits non-zero at start-up naming the field, releasing nothing."""
    url = schema_registry
    kafka, values = await topics_with_input(kafka_bootstrap, url, "avro-restart", range(40))
    config = avro_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, url, PRIVACY)
    async with Collector(kafka_bootstrap, kafka["output_topic"]) as out:
        for run, batch in enumerate((values[:20], values[20:])):
            await produce(kafka_bootstrap, kafka["input_topic"], [(b"k", v, []) for v in batch])
            worker = WorkerProcess(config, tmp_path / f"worker{run}.log")
            async with started(worker):
                await wait_while_alive(out, 20 * (run + 1), worker, within_s=120)
                assert await worker.terminate() == 0, worker.log_text()[-3000:]

        subject = f"{kafka['output_topic']}-value"
        with SchemaRegistryClient({"url": url}) as client:
            versions = client.get_versions(subject)
            schema_id = client.get_latest_version(subject).schema_id
        assert versions == [1]
        assert {int.from_bytes(r.value[1:5], "big") for r in out.records} == {schema_id}

        narrowed = json.loads(json.dumps(PRIVACY))
        narrowed["fields"][3]["domain"] = ["TX", "CA"]
        changed = avro_config(tmp_path / "narrowed.yaml", kafka_bootstrap, kafka, url, narrowed)
        await produce(kafka_bootstrap, kafka["input_topic"], [(b"k", values[0], [])])
        refused = WorkerProcess(changed, tmp_path / "refused.log")
        async with started(refused):
            code = await refused.wait(within_s=120)
        log = refused.log_text()
        assert code == 2, log[-3000:]  # a config to fix (EXIT_CONFIG)
        assert "not BACKWARD compatible" in log and "field 'state'" in log, log[-3000:]
        assert "'NY'" in log, log[-3000:]
        with SchemaRegistryClient({"url": url}) as client:
            assert client.get_versions(subject) == [1]
    assert len(out.records) == 40  # the refused worker released nothing


async def example_script(name: str, *args: str) -> str:
    """Run ``examples/<name>`` as docs/avro.md does; its stdout."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(REPO_ROOT / "examples" / name),
        *args,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    return out.decode()


async def test_the_worked_example_of_the_avro_page_runs_as_documented(
    kafka_bootstrap: str, schema_registry: str, tmp_path: Path
) -> None:
    """docs/avro.md's example on the suite's broker and registry: avro_produce.py, `run`
    with examples/avro-telemetry.yaml, avro_read.py prints the sanitized records."""
    example = yaml.safe_load((REPO_ROOT / "examples" / "avro-telemetry.yaml").read_text())
    kafka = unique_topics("avro-example")
    await create_topics(kafka_bootstrap, list(kafka.values())[:3], partitions=1)
    example["kafka"].update(
        kafka, bootstrap_servers=kafka_bootstrap, schema_registry={"url": schema_registry}
    )
    body = {k: v for k, v in example.items() if k not in ("kafka", "http")}
    config = write_config(tmp_path / "example.yaml", kafka_bootstrap, example["kafka"], body)
    where = ["--bootstrap", kafka_bootstrap, "--registry", schema_registry]
    await example_script(
        "avro_produce.py", *where, "--topic", kafka["input_topic"], "--count", "200"
    )
    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with Collector(kafka_bootstrap, kafka["output_topic"]) as out, started(worker):
        await wait_while_alive(out, 200, worker, within_s=120)
        assert await worker.terminate() == 0, worker.log_text()[-3000:]
    printed = await example_script(
        "avro_read.py", *where, "--topic", kafka["output_topic"], "--count", "200"
    )
    records = [json.loads(line) for line in printed.splitlines()]
    assert sorted(r["seq"] for r in records) == list(range(200))
    assert {frozenset(r) for r in records} == {
        frozenset({"seq", "battery_temp_c", "country", "crashed"})
    }
    assert {r["country"] for r in records} <= {"US", "DE", "FR", "IN", "BR", "JP", "other"}


async def test_a_registry_down_at_start_delays_the_output_and_loses_nothing(
    kafka_bootstrap: str, schema_registry_server: Registry, tmp_path: Path
) -> None:
    """The output schema cannot be registered while the registry is down: the worker stays
    up and not ready, retrying, and releases nothing (there is no id to frame a value with);
    once the registry is back every record comes out once, as Avro, none dead-lettered."""
    url = schema_registry_server.url
    kafka, values = await topics_with_input(kafka_bootstrap, url, "avro-down", range(20))
    await produce(kafka_bootstrap, kafka["input_topic"], [(b"k", v, []) for v in values])
    port = free_port()
    body = {**PRIVACY, "http": {"host": "127.0.0.1", "port": port}}
    config = avro_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, url, body)
    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with Collector(kafka_bootstrap, kafka["output_topic"]) as out:
        await asyncio.to_thread(schema_registry_server.stop)
        try:
            async with started(worker):

                async def retrying() -> bool:
                    assert worker.alive, worker.log_text()[-3000:]
                    return worker.log_text().count("schema registry request") >= 2

                await poll_until(retrying, 60, "two failed registrations")
                code, _ = await http_get(port, "/readyz")
                assert (code, len(out.records)) == (503, 0)
                await asyncio.to_thread(schema_registry_server.start)
                await readiness_becomes(port, 200, worker, within_s=120)
                await wait_while_alive(out, 20, worker, within_s=120)
                assert await worker.terminate() == 0, worker.log_text()[-3000:]
        finally:
            await asyncio.to_thread(schema_registry_server.start)  # a no-op once it runs
    records = read_back(url, kafka["output_topic"], [r.value for r in out.records])
    assert sorted(r["seq"] for r in records) == list(range(20))
    assert await read_all(kafka_bootstrap, kafka["dead_letter_topic"], partitions=1) == []


async def test_avro_output_with_ledger_windows_from_the_event_time(
    kafka_bootstrap: str, schema_registry: str, tmp_path: Path
) -> None:
    """``privacy.ledger.time`` reads the released time back from the JSON outputs, so the
    worker charges a batch before it encodes it as Avro (red team 12: encoded first, every
    batch failed to charge and the worker restarted into it forever). Three records of one
    subject in one hour against a cap of two: two released as Avro, one dead-lettered."""
    kafka = await fault_topics(kafka_bootstrap, "avro-time")
    now = datetime.now(UTC).isoformat()
    values = [json.dumps({"device_id": "a", "ts": now, "x": 1.0}).encode() for _ in range(3)]
    await produce(kafka_bootstrap, kafka["input_topic"], [(b"a", v, []) for v in values])
    fields = [
        {"name": "device_id", "kind": "drop"},
        {"name": "ts", "kind": "timestamp", "granularity": "1m"},
        {"name": "x", "kind": "real", "bounds": [0, 10], "epsilon": 1.0},
    ]
    ledger = {"window": "1h", "epsilon": 2.0, "over_budget": "dead_letter", "time": "ts"}
    body = {"privacy": {"epsilon": 1.0, "subject": "device_id", "ledger": ledger}, "fields": fields}
    settings = {**kafka, "output_format": "avro", "schema_registry": {"url": schema_registry}}
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, settings, body)
    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with (
        Collector(kafka_bootstrap, kafka["output_topic"]) as out,
        Collector(kafka_bootstrap, kafka["dead_letter_topic"]) as dead,
        started(worker),
    ):
        await wait_while_alive(out, 2, worker, within_s=120)
        await wait_while_alive(dead, 1, worker, within_s=60)
        assert await worker.terminate() == 0, worker.log_text()[-3000:]
    assert "LedgerError" not in worker.log_text()
    records = read_back(schema_registry, kafka["output_topic"], [r.value for r in out.records])
    assert [sorted(r) for r in records] == [["ts", "x"], ["ts", "x"]]
    assert [dict(r.headers)["privstream-reason"] for r in dead.records] == [b"budget_exhausted"]

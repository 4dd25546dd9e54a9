"""Protobuf output under a real schema registry, a real worker and broker (issue 33).

Protobuf in gives Protobuf out by default: the sanitized records are framed with the id
of the ``.proto`` derived from the config, registered as PROTOBUF under
``<output_topic>-value`` with BACKWARD compatibility, and the message index of
``Sanitized``. They are read back as an analyst would: the registered text compiled
with ``protoc``, the values read with confluent-kafka's ``ProtobufDeserializer``; and by
``privstream estimate --topic``. A restart with the same config reuses the schema id; a
config whose message would read the old records as other values is refused at start-up.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

from tests.integration.test_avro_output import estimate_topic
from tests.integration.test_protobuf_json_schema_input import reading, topics
from tests.support.avro import MessageField, SchemaRegistryClient, SerializationContext
from tests.support.protobuf import V1_FIELDS, compiled_class, message_class, protobuf_writer
from tests.support.protobuf import reading_file as reading_proto
from tests.support.worker_proc import (
    PRIVACY,
    Collector,
    WorkerProcess,
    produce,
    started,
    wait_while_alive,
    write_config,
)


def protobuf_config(
    path: Path, bootstrap: str, kafka: dict[str, str], url: str, privacy: dict[str, Any]
) -> Path:
    settings = {**kafka, "format": "protobuf", "schema_registry": {"url": url}}
    return write_config(path, bootstrap, settings, privacy)


def produced(url: str, topic: str, seqs: range) -> list[bytes]:
    """Readings framed by confluent-kafka's ``ProtobufSerializer`` (message index [1])."""
    with SchemaRegistryClient({"url": url}) as client:
        write = protobuf_writer(client, topic, message_class(reading_proto(V1_FIELDS)))
        return [write(reading(s)) for s in seqs]


def read_back(url: str, topic: str, values: list[bytes]) -> list[Any]:
    """The values as an analyst reads them: the latest registered text compiled by protoc,
    confluent-kafka's ``ProtobufDeserializer`` of that class."""
    with SchemaRegistryClient({"url": url}) as client:
        text = client.get_latest_version(f"{topic}-value").schema.schema_str
    deserializer = ProtobufDeserializer(compiled_class(text), {"use.deprecated.format": False})
    context = SerializationContext(topic, MessageField.VALUE)
    return [deserializer(value, context) for value in values]


async def run_until(worker: WorkerProcess, *waits: tuple[Collector, int]) -> None:
    """Run ``worker`` until each collector holds its count of records."""
    async with started(worker):
        for collector, count in waits:
            await wait_while_alive(collector, count, worker, within_s=120)
        assert await worker.terminate() == 0, worker.log_text()[-3000:]


async def test_protobuf_output_reads_back_with_a_standard_deserializer_and_estimates(
    kafka_bootstrap: str, schema_registry: str, tmp_path: Path
) -> None:
    """Every good record comes out once as Protobuf of the derived message (PROTOBUF, BACKWARD,
    under <output_topic>-value), with the config's fields only; a poison value is
    dead-lettered with its bytes as received; ``estimate --topic`` reads the Protobuf
    records through the registry."""
    url = schema_registry
    kafka = await topics(kafka_bootstrap, "protobuf-out")
    poison = b'{"seq": 99}'
    values = [*produced(url, kafka["input_topic"], range(60)), poison]
    await produce(kafka_bootstrap, kafka["input_topic"], [(b"k", v, []) for v in values])
    config = protobuf_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, url, PRIVACY)
    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with (
        Collector(kafka_bootstrap, kafka["output_topic"]) as out,
        Collector(kafka_bootstrap, kafka["dead_letter_topic"]) as dead,
    ):
        await run_until(worker, (out, 60), (dead, 1))

    subject = f"{kafka['output_topic']}-value"
    with SchemaRegistryClient({"url": url}) as client:
        latest = client.get_latest_version(subject)
        compatibility = client.get_compatibility(subject)
    assert (compatibility, latest.schema.schema_type) == ("BACKWARD", "PROTOBUF")
    assert {r.value[:6] for r in out.records} == {
        b"\x00" + latest.schema_id.to_bytes(4, "big") + b"\x00"
    }
    messages = read_back(url, kafka["output_topic"], [r.value for r in out.records])
    assert sorted(m.seq.long_value for m in messages) == list(range(60))
    assert {f.name for f in messages[0].DESCRIPTOR.fields} == {
        "seq",
        "salary",
        "state",
        "opted_in",
    }
    assert {m.state for m in messages} <= {"TX", "CA", "NY"}
    assert len({m.salary for m in messages}) > 50  # noised doubles, not the raw 1504 + seq
    assert [r.value for r in dead.records] == [poison]
    assert dict(dead.records[0].headers)["privstream-reason"] == b"protobuf_no_magic_byte"

    report = await estimate_topic(config)
    assert report["records_read"] == 60 and report["records_skipped"] == {}
    fields = {f["name"]: f for f in report["fields"]}
    assert {e["value"] for e in fields["state"]["frequencies"]} == {"TX", "CA", "NY"}


async def test_a_restart_reuses_the_schema_id_and_an_incompatible_config_is_refused(
    kafka_bootstrap: str, schema_registry: str, tmp_path: Path
) -> None:
    """The same config twice: one schema version, one id in every output. Then a config that
    releases ``salary`` as an integer (int64 where the old records hold a double: a reader
    would take their bits for other values): the worker exits 2 at start-up naming the
    field, releasing nothing, registering nothing."""
    url = schema_registry
    kafka = await topics(kafka_bootstrap, "protobuf-restart")
    values = produced(url, kafka["input_topic"], range(40))
    config = protobuf_config(tmp_path / "config.yaml", kafka_bootstrap, kafka, url, PRIVACY)
    subject = f"{kafka['output_topic']}-value"
    async with Collector(kafka_bootstrap, kafka["output_topic"]) as out:
        for run, batch in enumerate((values[:20], values[20:])):
            await produce(kafka_bootstrap, kafka["input_topic"], [(b"k", v, []) for v in batch])
            worker = WorkerProcess(config, tmp_path / f"w{run}.log")
            await run_until(worker, (out, 20 * (run + 1)))
        with SchemaRegistryClient({"url": url}) as client:
            assert client.get_versions(subject) == [1]
            schema_id = client.get_latest_version(subject).schema_id
        assert {int.from_bytes(r.value[1:5], "big") for r in out.records} == {schema_id}

        integral = json.loads(json.dumps(PRIVACY))
        integral["fields"][2] = {"name": "salary", "kind": "integer", "bounds": [1504, 4500]}
        integral["fields"][2]["epsilon"] = 1.0
        changed = protobuf_config(tmp_path / "int.yaml", kafka_bootstrap, kafka, url, integral)
        await produce(kafka_bootstrap, kafka["input_topic"], [(b"k", values[0], [])])
        refused = WorkerProcess(changed, tmp_path / "refused.log")
        async with started(refused):
            code = await refused.wait(within_s=120)
        log = refused.log_text()
        assert code == 2, log[-3000:]  # a config to fix (EXIT_CONFIG)
        assert "not BACKWARD compatible" in log, log[-3000:]
        assert "field 'salary' changes from double to int64" in log, log[-3000:]
        with SchemaRegistryClient({"url": url}) as client:
            assert client.get_versions(subject) == [1]
    assert len(out.records) == 40  # the refused worker released nothing

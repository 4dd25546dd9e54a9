"""JSON Schema output under a real schema registry, a real worker and broker (issue 33).

JSON Schema in gives JSON Schema out by default: the sanitized JSON records are framed
with the id of the schema derived from the config, registered as JSON under
``<output_topic>-value`` with BACKWARD compatibility. They are read back with
confluent-kafka's ``JSONDeserializer`` (which validates each one against the registered
schema) and by ``privstream estimate --topic``; a config whose schema the old records
would not satisfy is refused at start-up.
"""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka.schema_registry.json_schema import JSONDeserializer

from tests.integration.test_avro_output import estimate_topic
from tests.integration.test_protobuf_json_schema_input import (
    json_schema_values,
    reading,
    topics,
)
from tests.integration.test_protobuf_output import run_until
from tests.support.avro import MessageField, SchemaRegistryClient, SerializationContext
from tests.support.worker_proc import (
    PRIVACY,
    Collector,
    WorkerProcess,
    produce,
    started,
    write_config,
)


async def test_json_schema_output_reads_back_estimates_and_refuses_a_narrowed_domain(
    kafka_bootstrap: str, schema_registry: str, tmp_path: Path
) -> None:
    """Every record comes out once, framed with the id of the derived schema (JSON, BACKWARD),
    valid under it for confluent-kafka's ``JSONDeserializer``, with the config's fields
    only; ``estimate --topic`` reads them through the registry. Then a config that drops
    the domain value 'NY' of ``state`` (records hold it) exits 2 naming the field and the
    value, releasing and registering nothing."""
    url = schema_registry
    kafka = await topics(kafka_bootstrap, "json-schema-out")
    values, _ = json_schema_values(url, kafka["input_topic"], [reading(s) for s in range(40)], [])
    await produce(kafka_bootstrap, kafka["input_topic"], [(b"k", v, []) for v in values])
    settings = {**kafka, "format": "json_schema", "schema_registry": {"url": url}}
    config = write_config(tmp_path / "config.yaml", kafka_bootstrap, settings, PRIVACY)
    subject = f"{kafka['output_topic']}-value"
    async with Collector(kafka_bootstrap, kafka["output_topic"]) as out:
        await run_until(WorkerProcess(config, tmp_path / "worker.log"), (out, 40))
        with SchemaRegistryClient({"url": url}) as client:
            latest = client.get_latest_version(subject)
            assert client.get_compatibility(subject) == "BACKWARD"
        assert latest.schema.schema_type == "JSON"
        assert {r.value[:5] for r in out.records} == {b"\x00" + latest.schema_id.to_bytes(4, "big")}
        deserializer = JSONDeserializer(latest.schema.schema_str)
        context = SerializationContext(kafka["output_topic"], MessageField.VALUE)
        records = [deserializer(r.value, context) for r in out.records]
        assert sorted(r["seq"] for r in records) == list(range(40))
        assert {frozenset(r) for r in records} == {
            frozenset({"seq", "salary", "state", "opted_in"})
        }

        report = await estimate_topic(config)
        assert report["records_read"] == 40 and report["records_skipped"] == {}

        narrowed = json.loads(json.dumps(PRIVACY))
        narrowed["fields"][3]["domain"] = ["TX", "CA"]
        changed = write_config(tmp_path / "narrowed.yaml", kafka_bootstrap, settings, narrowed)
        await produce(kafka_bootstrap, kafka["input_topic"], [(b"k", values[0], [])])
        refused = WorkerProcess(changed, tmp_path / "refused.log")
        async with started(refused):
            code = await refused.wait(within_s=120)
        log = refused.log_text()
        assert code == 2, log[-3000:]
        assert "field 'state' no longer has the domain values ['NY']" in log, log[-3000:]
        with SchemaRegistryClient({"url": url}) as client:
            assert client.get_versions(subject) == [latest.version]
    assert len(out.records) == 40

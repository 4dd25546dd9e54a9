"""Avro input under a real schema registry, against a real worker and broker (issue 33).

The producer is confluent-kafka's ``AvroSerializer`` with the suite's registry
(``tests/support/registry.py``), as a user's would be. The worker reads the Confluent
wire format, fetches writer schemas by id, and sanitizes the records under the
same config as JSON ones; the output is JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.avro import SchemaRegistryClient, avro_writer
from tests.support.broker import create_topics
from tests.support.faults import free_port
from tests.support.registry import Registry, released_through_an_outage
from tests.support.worker_proc import (
    PRIVACY,
    Collector,
    WorkerProcess,
    decode,
    produce,
    read_all,
    started,
    unique_topics,
    wait_while_alive,
    write_config,
)

V1: dict[str, Any] = {
    "type": "record",
    "name": "Reading",
    "namespace": "privstream.test",
    "fields": [
        {"name": "device_id", "type": "string"},
        {"name": "seq", "type": "int"},
        {"name": "salary", "type": "double"},
        {"name": "state", "type": "string"},
        {"name": "opted_in", "type": "boolean"},
    ],
}
#: v2 adds a field with a default (a BACKWARD-compatible change); the config does not list
#: it, so it is never released
V2: dict[str, Any] = {
    **V1,
    "fields": [*V1["fields"], {"name": "firmware", "type": "string", "default": "?"}],
}


def reading(seq: int, **extra: Any) -> dict[str, Any]:
    return {
        "device_id": f"dev-{seq}",
        "seq": seq,
        "salary": 1504.0 + seq,
        "state": ["TX", "CA", "NY"][seq % 3],
        "opted_in": seq % 2 == 0,
        **extra,
    }


def avro_config(
    tmp_path: Path, bootstrap: str, kafka: dict[str, str], url: str, **body: Any
) -> Path:
    # JSON output: these tests are about the input side (test_avro_output has the other)
    settings = {**kafka, "format": "avro", "output_format": "json", "schema_registry": {"url": url}}
    return write_config(tmp_path / "config.yaml", bootstrap, settings, {**PRIVACY, **body})


async def test_v1_and_v2_records_sanitize_under_one_config_and_unreadable_ones_are_dead_letters(
    kafka_bootstrap: str, schema_registry: str, tmp_path: Path
) -> None:
    """v1 and v2 records of one subject all come out, each once, with the config's fields
    only; a value without the magic byte, one naming an id the registry does not have and
    one whose payload is cut short are dead-lettered with their reasons, bytes as received."""
    kafka = unique_topics("avro")
    raw = kafka["input_topic"]
    await create_topics(kafka_bootstrap, [raw], partitions=1)
    await create_topics(kafka_bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 1)
    with SchemaRegistryClient({"url": schema_registry}) as client:
        v1 = [avro_writer(client, raw, V1)(reading(s)) for s in range(40)]
        v2 = [avro_writer(client, raw, V2)(reading(s, firmware="9.1")) for s in range(40, 80)]
    assert v1[0][1:5] != v2[0][1:5], "v2 must have its own schema id"
    unknown_id = b"\x00" + (2**31 - 7).to_bytes(4, "big") + v1[0][5:]
    poison = [b'{"seq": 1}', unknown_id, v2[0][:-3]]
    await produce(kafka_bootstrap, raw, [(b"k", v, []) for v in [*v1, *poison, *v2]])

    config = avro_config(tmp_path, kafka_bootstrap, kafka, schema_registry)
    worker = WorkerProcess(config, tmp_path / "worker.log")
    async with (
        Collector(kafka_bootstrap, kafka["output_topic"]) as out,
        Collector(kafka_bootstrap, kafka["dead_letter_topic"]) as dead,
        started(worker),
    ):
        await wait_while_alive(out, 80, worker, within_s=120)
        await wait_while_alive(dead, 3, worker, within_s=60)
        assert await worker.terminate() == 0, worker.log_text()[-3000:]

    bodies = decode(out.records)
    assert sorted(b["seq"] for b in bodies) == list(range(80))  # each good record once
    assert {frozenset(b) for b in bodies} == {frozenset({"seq", "salary", "state", "opted_in"})}
    assert [r.value for r in dead.records] == poison
    reasons = [dict(r.headers)["privstream-reason"] for r in dead.records]
    assert reasons == [b"avro_no_magic_byte", b"avro_unknown_schema_id", b"avro_undecodable"]


async def test_a_registry_outage_mid_stream_loses_nothing_and_dead_letters_nothing(
    kafka_bootstrap: str, schema_registry_server: Registry, tmp_path: Path
) -> None:
    """v1 records go through; the registry stops; v2 records (a schema id the worker has
    not fetched yet) arrive. The worker must stay up, answer /readyz 503 and release none
    of them; once the registry is back it releases every one, once, and dead-letters none."""
    url = schema_registry_server.url
    kafka = unique_topics("avro-outage")
    raw = kafka["input_topic"]
    await create_topics(kafka_bootstrap, [raw], partitions=1)
    await create_topics(kafka_bootstrap, [kafka["output_topic"], kafka["dead_letter_topic"]], 1)
    with SchemaRegistryClient({"url": url}) as client:
        v1 = [avro_writer(client, raw, V1)(reading(s)) for s in range(30)]
        v2 = [avro_writer(client, raw, V2)(reading(s, firmware="2")) for s in range(30, 60)]
    port = free_port()
    config = avro_config(
        tmp_path, kafka_bootstrap, kafka, url, http={"host": "127.0.0.1", "port": port}
    )
    worker = WorkerProcess(config, tmp_path / "worker.log")
    released = await released_through_an_outage(
        kafka_bootstrap,
        schema_registry_server,
        (raw, kafka["output_topic"]),
        worker,
        port,
        (v1, v2),
    )

    assert sorted(b["seq"] for b in decode(released)) == list(range(60))
    assert await read_all(kafka_bootstrap, kafka["dead_letter_topic"], partitions=1) == []
    assert "schema registry request" in worker.log_text()

"""The worker's writer-schema cache (privstream.worker.schemas); the registry requests
themselves run against a real registry in tests/integration/test_avro_input.py."""

from __future__ import annotations

import io
import json

from aiokafka import ConsumerRecord
from fastavro import schemaless_writer
from privstream.config.registry import SchemaRegistryConfig
from privstream.pipeline.avro import Undecoded, WriterSchema, parse_writer_schema
from privstream.pipeline.formats import codec
from privstream.worker.schemas import FramedDecoded, FramedRejected, WriterSchemas, as_received

SCHEMA = parse_writer_schema(
    1, json.dumps({"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]})
)


class Counting(WriterSchemas):
    """Answers every id from a table and counts the requests it would send."""

    def __init__(self, cache_size: int, known: set[int]) -> None:
        super().__init__(
            SchemaRegistryConfig(url="http://127.0.0.1:1", cache_size=cache_size), codec("avro", ())
        )
        self.known = known
        self.fetched: list[int] = []

    def _fetch(self, sid: int) -> WriterSchema | Undecoded:
        self.fetched.append(sid)
        if sid in self.known:
            return SCHEMA
        return Undecoded("avro_unknown_schema_id", f"schema id {sid} is not in the registry")


def record(offset: int, value: bytes | None) -> ConsumerRecord:
    return ConsumerRecord("t", 0, offset, 0, 0, b"k", value, None, 1, len(value or b""), ())


def framed(sid: int, n: int) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, SCHEMA, {"n": n})
    return b"\x00" + sid.to_bytes(4, "big") + out.getvalue()


def test_one_request_per_new_id_per_batch_never_one_per_record() -> None:
    schemas = Counting(cache_size=10, known={1, 2})
    batch = [record(i, framed(1 + i % 2, i)) for i in range(100)]
    schemas.decode(batch)
    schemas.decode(batch)
    assert sorted(schemas.fetched) == [1, 2]


def test_an_unknown_id_is_asked_again_by_the_next_batch() -> None:
    schemas = Counting(cache_size=10, known={1})
    first = schemas.decode([record(0, framed(5, 0))])
    assert isinstance(first[0], FramedRejected)
    assert first[0].problem == "avro_unknown_schema_id"
    schemas.known.add(5)  # registered meanwhile
    second = schemas.decode([record(0, framed(5, 0))])
    assert isinstance(second[0], FramedDecoded)
    assert schemas.fetched == [5, 5]


def test_the_cache_drops_the_least_recently_used_id_past_its_size() -> None:
    schemas = Counting(cache_size=2, known={1, 2, 3})
    for sid in (1, 2, 1, 3, 1, 2):
        schemas.get(sid)
    assert schemas.fetched == [1, 2, 3, 2]


def test_noise_is_keyed_on_the_bytes_as_received_not_on_their_json() -> None:
    raw = framed(1, 7)
    schemas = Counting(cache_size=2, known={1})
    decoded = schemas.decode([record(0, raw), record(1, b"not avro")])
    assert decoded[0].value == b'{"n":7}'
    assert isinstance(decoded[1], FramedRejected) and decoded[1].value == b"not avro"
    assert as_received(decoded, [r.value or b"" for r in decoded]) == [raw, b"not avro"]

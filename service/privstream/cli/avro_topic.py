"""``estimate --topic`` on an Avro output topic: each value read with its writer schema.

The writer schema comes from the registry by the id in the value (cached,
``privstream.worker.schemas``), so records written under an older version of
the output schema are read as they were written. Each record is handed to the
estimate as the JSON the worker would have released (local-hashing seeds
unsigned again, ``privstream.pipeline.avro_encode.plain``). A value that is not
Avro of a known schema is skipped with its reason, never guessed at; a
registry that does not answer stops the estimate.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import orjson
from fastavro import schemaless_reader

from privstream.config.registry import SchemaRegistryConfig
from privstream.estimate.releases import Sink
from privstream.pipeline import RecordPlan
from privstream.pipeline.avro import HEADER_BYTES, Undecoded, schema_id
from privstream.pipeline.avro_encode import plain
from privstream.pipeline.avro_schema import hash_report_fields
from privstream.pipeline.batch import read_names
from privstream.pipeline.formats import codec
from privstream.worker.schemas import WriterSchemas


class AvroValues:
    """A sink of framed Avro values feeding a sink of JSON records."""

    def __init__(
        self,
        registry: SchemaRegistryConfig,
        plan: RecordPlan,
        add: Sink,
        skip: Callable[[str], None],
    ) -> None:
        self._schemas = WriterSchemas(registry, codec("avro", read_names(plan, None)))
        self._reports = hash_report_fields(plan)
        self._add = add
        self._skip = skip

    def add(self, value: bytes, refused: frozenset[str] = frozenset()) -> None:
        sid = schema_id(value)
        if sid is None:
            self._skip("avro_no_magic_byte")
            return
        schema = self._schemas.get(sid)
        if isinstance(schema, Undecoded):
            self._skip(schema.reason)
            return
        buffer = io.BytesIO(value)
        buffer.seek(HEADER_BYTES)
        try:
            record = schemaless_reader(buffer, schema, None)
        except Exception:  # fastavro raises several types for a payload its schema refuses
            self._skip("avro_undecodable")
            return
        if not isinstance(record, dict) or buffer.tell() != len(value):
            self._skip("avro_undecodable")
            return
        text = orjson.dumps(plain(record, self._reports))
        if refused:
            self._add(text, refused)
        else:
            self._add(text)

"""``estimate --topic`` on a Protobuf output topic: each value read with its writer schema.

As for Avro (``avro_topic``): the writer schema comes from the registry by the
id in the value (cached, ``privstream.worker.schemas``) and is read by the
Protobuf input's decoder (``privstream.pipeline.protobuf``), so records
written under an older version of the output schema are read as they were
written. Each record is handed to the estimate as the JSON the worker would
have released (public values out of their ``Scalar``, nullable fields that
are unset as null: ``privstream.pipeline.protobuf_output``). A value that is
not Protobuf of a known schema is skipped with its reason, never guessed at; a
registry that does not answer stops the estimate.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from privstream.config import AppConfig
from privstream.config.registry import SchemaRegistryConfig
from privstream.pipeline import RecordPlan
from privstream.pipeline.avro import Undecoded, schema_id
from privstream.pipeline.batch import read_names
from privstream.pipeline.formats import codec
from privstream.pipeline.protobuf_output import output_proto
from privstream.worker.schemas import WriterSchemas


class ProtobufValues:
    """A sink of framed Protobuf values feeding a sink of JSON records."""

    def __init__(
        self,
        registry: SchemaRegistryConfig,
        config: AppConfig,
        plan: RecordPlan,
        add: Callable[[bytes], None],
        skip: Callable[[str], None],
    ) -> None:
        self._codec = codec("protobuf", read_names(plan, None))
        self._schemas = WriterSchemas(registry, self._codec)
        self._restore = output_proto(config.fields, plan).restore
        self._add = add
        self._skip = skip

    def add(self, value: bytes) -> None:
        sid = schema_id(value)
        if sid is None:
            self._skip("protobuf_no_magic_byte")
            return
        schema = self._schemas.get(sid)
        if isinstance(schema, Undecoded):
            self._skip(schema.reason)
            return
        [read] = self._codec.to_json([value], {sid: schema})
        if isinstance(read, Undecoded):
            self._skip(read.reason)
            return
        self._add(orjson.dumps(self._restore(orjson.loads(read))))

"""``estimate --topic`` on a Protobuf or JSON Schema output topic: each value read with its
writer schema.

As for Avro (``avro_topic``): the writer schema comes from the registry by the
id in the value (cached, ``privstream.worker.schemas``) and is read by the
format's input decoder (``privstream.pipeline.protobuf``, ``json_schema``), so
records written under an older version of the output schema are read as they
were written. Each record is handed to the estimate as the JSON the worker
would have released (Protobuf: public values out of their ``Scalar``, unset
nullable fields null, ``privstream.pipeline.protobuf_output``). A value that
is not of the format under a known schema is skipped with its reason, never
guessed at; a registry that does not answer stops the estimate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from privstream.config import AppConfig
from privstream.config.registry import SchemaRegistryConfig
from privstream.estimate.releases import Sink
from privstream.pipeline import RecordPlan
from privstream.pipeline.avro import Undecoded, schema_id
from privstream.pipeline.batch import read_names
from privstream.pipeline.formats import codec
from privstream.worker.schemas import WriterSchemas


class FramedValues:
    """A sink of framed Protobuf or JSON Schema values feeding a sink of JSON records."""

    def __init__(
        self,
        registry: SchemaRegistryConfig,
        config: AppConfig,
        plan: RecordPlan,
        add: Sink,
        skip: Callable[[str], None],
    ) -> None:
        name = config.needs_kafka("estimate --topic").output_encoding
        self._codec = codec(name, read_names(plan, None))
        self._schemas = WriterSchemas(registry, self._codec)
        self._restore: Callable[[Any], Any] | None = None
        if name == "protobuf":
            from privstream.pipeline.protobuf_output import output_proto

            self._restore = output_proto(config.fields, plan).restore
        self._no_magic = f"{name}_no_magic_byte"
        self._add = add
        self._skip = skip

    def add(self, value: bytes, refused: frozenset[str] = frozenset()) -> None:
        sid = schema_id(value)
        if sid is None:
            self._skip(self._no_magic)
            return
        schema = self._schemas.get(sid)
        if isinstance(schema, Undecoded):
            self._skip(schema.reason)
            return
        [read] = self._codec.to_json([value], {sid: schema})
        if isinstance(read, Undecoded):
            self._skip(read.reason)
            return
        text = read if self._restore is None else orjson.dumps(self._restore(orjson.loads(read)))
        if refused:  # the fields released otherwise than --config says (``releases``)
            self._add(text, refused)
        else:
            self._add(text)

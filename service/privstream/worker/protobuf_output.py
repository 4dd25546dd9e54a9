"""Protobuf output: the ``.proto`` derived from the config
(``privstream.pipeline.protobuf_output``), compiled once at start-up and
registered under ``<output_topic>-value`` as ``PROTOBUF``, BACKWARD
(``output_schema`` does the registry's part; this module is what it imports
for Protobuf, so the ``protobuf`` package is needed only where it is used).

A config whose message the registry refuses is named field by field from the
latest registered version: a field whose number now has another type, name or
label, and a field taken out of the config (Apicurio Registry refuses a
removed field that the new version does not reserve; Confluent's registry
lets it go).
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from privstream.config import AppConfig
from privstream.errors import OutputSchemaError
from privstream.pipeline import RecordPlan
from privstream.pipeline.avro import Undecoded
from privstream.pipeline.protobuf_encode import ProtobufEncoder
from privstream.pipeline.protobuf_output import ProtoOutput, output_proto
from privstream.pipeline.protobuf_schema import ProtoSchema, parse_writer_schema

#: the .proto name of each scalar type (``FieldDescriptor.TYPE_DOUBLE`` -> ``double``)
_TYPES = {
    getattr(FieldDescriptor, name): name.removeprefix("TYPE_").lower()
    for name in dir(FieldDescriptor)
    if name.startswith("TYPE_")
}
#: the Confluent message index of ``Sanitized``: the file's first message
_SANITIZED = (0,)


class ProtobufDerived:
    """The derived ``.proto`` of one config, compiled (``output_schema.Derived``)."""

    schema_type = "PROTOBUF"
    advice = (
        "keep each field as it was (its kind and output type; a field taken out may be "
        "refused too), or write to a new kafka.output_topic"
    )

    def __init__(self, derived: ProtoOutput, message: Any) -> None:
        self.text = derived.text
        self._derived = derived
        #: the message class of ``Sanitized``
        self._message = message

    @classmethod
    def of(cls, config: AppConfig, plan: RecordPlan) -> ProtobufDerived:
        """Raises ``OutputSchemaError`` naming a field Protobuf cannot hold."""
        derived = output_proto(config.fields, plan)
        compiled = parse_writer_schema(0, derived.text)
        if isinstance(compiled, Undecoded):  # a field name that clashes with a derived type
            raise OutputSchemaError(
                f"the Protobuf message derived from this config does not compile "
                f"({compiled.detail}); rename the field it names in the output, or set "
                "kafka.output_format: json"
            )
        return cls(derived, compiled.message_class(_SANITIZED))

    def encoder(self, schema_id: int) -> ProtobufEncoder:
        return ProtobufEncoder(schema_id, self._message, self._derived.adapt)

    def problems(self, latest: str) -> list[str]:
        old = parse_writer_schema(0, latest)
        if isinstance(old, Undecoded) or old.message_class(_SANITIZED) is None:
            return []
        return _differences(_top(old), self._message.DESCRIPTOR, "")


def _top(schema: ProtoSchema) -> Any:
    return schema.message_class(_SANITIZED).DESCRIPTOR


def _differences(old: Any, new: Any, prefix: str) -> list[str]:
    """Per field number of ``old``'s message: how ``new`` reads it differently."""
    problems = []
    for number, before in old.fields_by_number.items():
        name = prefix + before.name
        after = new.fields_by_number.get(number)
        if after is None:
            problems.append(
                f"field {name!r} is no longer in the config, and records already in the "
                "topic hold it"
            )
        elif after.name != before.name:
            problems.append(f"field {name!r} (number {number}) is now {after.name!r}")
        elif _type(after) != _type(before) or after.is_repeated != before.is_repeated:
            problems.append(
                f"field {name!r} changes from {_label(before)} to {_label(after)}, which "
                "reads the records already in the topic as other values"
            )
        elif before.message_type is not None:
            problems += _differences(before.message_type, after.message_type, f"{name}.")
    return problems


def _type(field: Any) -> Any:
    return field.message_type.name if field.message_type is not None else field.type


def _label(field: Any) -> str:
    kind = field.message_type.name if field.message_type is not None else _TYPES[field.type]
    return f"repeated {kind}" if field.is_repeated else kind

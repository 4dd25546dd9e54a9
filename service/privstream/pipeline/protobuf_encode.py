"""Sanitized records as Protobuf in the Confluent wire format.

The pipeline releases JSON text (``privstream.pipeline.encode``); a batch's
texts are decoded once more, shaped as the derived message wants them
(``protobuf_output``: public values into their ``Scalar`` oneof, nullable
lists into their wrapper) and serialized by the ``protobuf`` runtime's class
of the registered schema, framed with the magic byte 0, the schema's registry
id and the message index of ``Sanitized`` (the single byte 0: the file's
first message). A record the message cannot hold (only a public field can
carry one: a string with a lone surrogate, which is no UTF-8; a number beyond
a double) is dead-lettered, never released in part.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import msgspec
from google.protobuf.message import EncodeError

from privstream.pipeline.avro import HEADER_BYTES, MAGIC
from privstream.pipeline.protobuf_output import Adapt
from privstream.pipeline.results import BatchResult, DeadLetter

#: dead-letter reason of a sanitized record the output message cannot hold
UNENCODABLE = "protobuf_output_unencodable"
#: the message indexes of the file's first message: a count of zero
FIRST_MESSAGE = b"\x00"
_DECODE = msgspec.json.decode
#: what a record that does not fit the message raises (upb: wrong type, range, UTF-8)
_UNFIT = (ValueError, TypeError, OverflowError, EncodeError)


@dataclass(frozen=True)
class ProtobufEncoder:
    """Writes sanitized JSON records as framed Protobuf of one registered schema."""

    schema_id: int
    #: the message class of ``Sanitized`` (``protobuf_schema.ProtoSchema``)
    message: Any
    adapt: Adapt | None
    _header: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        framing = bytes([MAGIC]) + self.schema_id.to_bytes(HEADER_BYTES - 1, "big")
        object.__setattr__(self, "_header", framing + FIRST_MESSAGE)

    def encode(self, result: BatchResult) -> BatchResult:
        """``result`` with Protobuf outputs; a record the message cannot hold is
        dead-lettered."""
        if not result.outputs:
            return result
        try:  # one JSON decode for the batch
            records: list[Any] = _DECODE(b"[" + b",".join(result.outputs) + b"]")
        except ValueError:  # a lone surrogate, which msgspec refuses: each on its own below
            records = list(result.outputs)
        outputs: list[bytes] = []
        kept: list[int] = []
        dead: list[DeadLetter] = []
        for position, record in enumerate(records):
            try:
                outputs.append(self.value(_DECODE(record) if type(record) is bytes else record))
            except _UNFIT as exc:
                dead.append(DeadLetter(result.output_index[position], UNENCODABLE, _why(exc)))
                continue
            kept.append(position)
        if not dead:
            return replace(result, outputs=outputs)
        subjects = result.subjects
        return replace(
            result,
            outputs=outputs,
            output_index=[result.output_index[p] for p in kept],
            subjects=None if subjects is None else [subjects[p] for p in kept],
            dead_letters=sorted([*result.dead_letters, *dead], key=lambda d: d.index),
        )

    def value(self, record: dict[str, Any]) -> bytes:
        """One record (as the JSON output holds it) as a framed Protobuf value."""
        if self.adapt is not None:
            record = self.adapt(record)
        payload: bytes = self.message(**record).SerializeToString()
        return self._header + payload


def _why(exc: Exception) -> str:
    # the runtime's messages may quote the value: never put a raw value in a header
    return (
        f"the sanitized record does not fit the output message ({type(exc).__name__}): "
        "a public field holds a value Protobuf cannot write (a string with a lone "
        "surrogate, which is no UTF-8, or a number beyond a double)"
    )

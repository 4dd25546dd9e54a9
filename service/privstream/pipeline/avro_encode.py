"""Sanitized records as Avro in the Confluent wire format, and back to the JSON they were.

The pipeline releases JSON text (``privstream.pipeline.encode``); a batch's
texts are decoded once more and written with fastavro's schemaless writer
under the derived output schema (``privstream.pipeline.avro_schema``),
framed with the magic byte 0 and the schema's registry id. A record the
schema cannot hold (only a public field can carry one: a string with a lone
surrogate, which Avro's UTF-8 cannot write; an integer beyond 64 bits is
written as a double by fastavro) is dead-lettered, never released in part.

A local-hashing seed is an unsigned 64-bit number; Avro's ``long`` is signed,
so the seed is written as the long with the same 64 bits and read back by
``plain`` (``privstream estimate``) as the unsigned number.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec
from fastavro import parse_schema, schemaless_writer

from privstream.pipeline.avro import HEADER_BYTES, MAGIC
from privstream.pipeline.results import BatchResult, DeadLetter

#: dead-letter reason of a sanitized record the output schema cannot hold
UNENCODABLE = "avro_output_unencodable"
_TWO_63 = 2**63
_TWO_64 = 2**64
_DECODE = msgspec.json.decode


@dataclass(frozen=True)
class AvroEncoder:
    """Writes sanitized JSON records as framed Avro of one registered schema."""

    schema_id: int
    schema: dict[str, Any]
    #: fields whose values are local-hashing reports (``avro_schema.hash_report_fields``)
    reports: tuple[str, ...] = ()
    _parsed: Any = field(init=False, repr=False, compare=False)
    _header: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_parsed", parse_schema(self.schema))
        header = bytes([MAGIC]) + self.schema_id.to_bytes(HEADER_BYTES - 1, "big")
        object.__setattr__(self, "_header", header)

    def encode(self, result: BatchResult) -> BatchResult:
        """``result`` with Avro outputs; a record the schema cannot hold is dead-lettered."""
        outputs: list[bytes] = []
        kept: list[int] = []
        dead = list(result.dead_letters)
        for position, text in enumerate(result.outputs):
            try:
                outputs.append(self.value(_DECODE(text)))
            except (ValueError, TypeError, OverflowError) as exc:
                dead.append(DeadLetter(result.output_index[position], UNENCODABLE, _why(exc)))
                continue
            kept.append(position)
        if len(kept) == len(result.outputs):
            return replace(result, outputs=outputs)
        subjects = result.subjects
        return replace(
            result,
            outputs=outputs,
            output_index=[result.output_index[p] for p in kept],
            subjects=None if subjects is None else [subjects[p] for p in kept],
            dead_letters=sorted(dead, key=lambda d: d.index),
        )

    def value(self, record: dict[str, Any]) -> bytes:
        """One record (as the JSON output holds it) as a framed Avro value."""
        for name in self.reports:
            report = record.get(name)
            if report is not None and report["seed"] >= _TWO_63:
                report["seed"] -= _TWO_64
        buffer = io.BytesIO()
        buffer.write(self._header)
        schemaless_writer(buffer, self._parsed, record)
        return buffer.getvalue()


def plain(record: dict[str, Any], reports: Sequence[str]) -> dict[str, Any]:
    """A record read from Avro as the JSON output holds it: local-hashing seeds unsigned."""
    for name in reports:
        report = record.get(name)
        if isinstance(report, dict) and isinstance(report.get("seed"), int) and report["seed"] < 0:
            report["seed"] += _TWO_64
    return record


def _why(exc: Exception) -> str:
    # fastavro's messages quote the value: never put a raw value in a dead-letter header
    return (
        f"the sanitized record does not fit the output schema ({type(exc).__name__}): "
        "a public field holds a value Avro cannot write (a string with a lone surrogate, "
        "which is no UTF-8)"
    )

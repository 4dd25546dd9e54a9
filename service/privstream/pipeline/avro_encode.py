"""Sanitized records as Avro in the Confluent wire format, and back to the JSON they were.

The pipeline releases JSON text (``privstream.pipeline.encode``); a batch's
texts are decoded once more and written by the writer compiled from the
derived output schema (``privstream.pipeline.avro_schema``, ``avro_write``),
framed with the magic byte 0 and the schema's registry id. A record the
schema cannot hold (only a public field can carry one: a string with a lone
surrogate, which Avro's UTF-8 cannot write; an integer beyond 64 bits is
written as the union's double) is dead-lettered, never released in part.

A local-hashing seed is an unsigned 64-bit number; Avro's ``long`` is signed,
so the seed is written as the long with the same 64 bits and read back by
``plain`` (``privstream estimate``) as the unsigned number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec

from privstream.pipeline.avro import HEADER_BYTES, MAGIC
from privstream.pipeline.avro_write import BatchWriter, Writer, batch_writer, record_writer
from privstream.pipeline.results import BatchResult, DeadLetter

#: dead-letter reason of a sanitized record the output schema cannot hold
UNENCODABLE = "avro_output_unencodable"
_TWO_63 = 2**63
_TWO_64 = 2**64
_DECODE = msgspec.json.decode
#: what a record that does not fit the schema raises (``avro_write``), or its JSON decode
_UNFIT = (ValueError, TypeError, OverflowError)


@dataclass(frozen=True)
class AvroEncoder:
    """Writes sanitized JSON records as framed Avro of one registered schema."""

    schema_id: int
    schema: dict[str, Any]
    #: fields whose values are local-hashing reports (``avro_schema.hash_report_fields``)
    reports: tuple[str, ...] = ()
    _write: Writer = field(init=False, repr=False, compare=False)
    _write_batch: BatchWriter = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        header = bytes([MAGIC]) + self.schema_id.to_bytes(HEADER_BYTES - 1, "big")
        object.__setattr__(self, "_write", record_writer(self.schema, header))
        object.__setattr__(self, "_write_batch", batch_writer(self.schema, header))

    def encode(self, result: BatchResult) -> BatchResult:
        """``result`` with Avro outputs; a record the schema cannot hold is dead-lettered."""
        if not result.outputs:
            return result
        try:  # the whole batch at once, one JSON decode and a column at a time
            records = _DECODE(b"[" + b",".join(result.outputs) + b"]")
            return replace(result, outputs=self._write_batch(self._signed(records)))
        except _UNFIT:
            return self._one_by_one(result)

    def value(self, record: dict[str, Any]) -> bytes:
        """One record (as the JSON output holds it) as a framed Avro value."""
        return self._write(self._signed([record])[0])

    def _signed(self, records: list[Any]) -> list[Any]:
        """The records with each local-hashing seed as the signed long of its 64 bits."""
        for name in self.reports:
            for record in records:
                report = record.get(name) if type(record) is dict else None
                if type(report) is dict and report.get("seed", 0) >= _TWO_63:
                    report["seed"] -= _TWO_64
        return records

    def _one_by_one(self, result: BatchResult) -> BatchResult:
        """Some record does not fit: each on its own, those that do not fit dead-lettered."""
        outputs: list[bytes] = []
        kept: list[int] = []
        dead = list(result.dead_letters)
        for position, text in enumerate(result.outputs):
            try:
                outputs.append(self.value(_DECODE(text)))
            except _UNFIT as exc:
                dead.append(DeadLetter(result.output_index[position], UNENCODABLE, _why(exc)))
                continue
            kept.append(position)
        subjects = result.subjects
        return replace(
            result,
            outputs=outputs,
            output_index=[result.output_index[p] for p in kept],
            subjects=None if subjects is None else [subjects[p] for p in kept],
            dead_letters=sorted(dead, key=lambda d: d.index),
        )


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

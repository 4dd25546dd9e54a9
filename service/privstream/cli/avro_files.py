"""``privstream sanitize`` on Avro Object Container Files: which files are Avro, and Avro output.

An input is read as a container file when ``--input-format avro`` says so,
or (``auto``, the default) when it starts with the container magic
``Obj\\x01``, which no JSON line can. Each record is read with the file's
embedded writer schema and handed to the plan as the JSON a framed Avro value
gives (``privstream.pipeline.avro.record_json``), so the config's fields,
paths and ``on_missing`` apply exactly as to JSON Lines.

``--output-format avro`` writes a container file of the schema derived from
the config (``privstream.pipeline.avro_schema``, as for an Avro output topic),
never of the input's schema; the default is JSON Lines, whatever the input.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from privstream.config import AppConfig
from privstream.mechanisms import NoiseSource
from privstream.pipeline import BatchResult, RecordPlan, process_batch
from privstream.pipeline.avro_container import MAGIC, ContainerWriter, is_container, json_records
from privstream.pipeline.avro_schema import hash_report_fields, output_schema, schema_text
from privstream.pipeline.decode import Names

#: records per ``process_batch`` call (and per output block)
CHUNK_RECORDS = 10_000


def reads_avro(input_format: str, stream: BinaryIO) -> bool:
    """Whether ``stream`` is read as a container file: the flag, else its first bytes.

    ``peek`` leaves the bytes to be read: a JSON Lines input is read from its start.
    A pipe may offer fewer bytes than the magic at first: ``--input-format avro``
    then decides.
    """
    if input_format != "auto":
        return input_format == "avro"
    peek = getattr(stream, "peek", None)
    return peek is not None and is_container(peek(len(MAGIC)))


def avro_chunks(stream: BinaryIO, name: str) -> Iterator[tuple[int, list[bytes]]]:
    """(number of the first record, the records as JSON texts), ``CHUNK_RECORDS`` at a time."""
    records = json_records(stream, name)
    first = 1
    while chunk := list(itertools.islice(records, CHUNK_RECORDS)):
        yield first, chunk
        first += len(chunk)


class AvroOutput:
    """Released records as a container file of the config's derived output schema.

    Built at start-up: a field Avro cannot hold raises ``OutputSchemaError`` before
    anything is read. A record the schema cannot hold (a public string with a lone
    surrogate) is dead-lettered, as on a topic (``avro_output_unencodable``).
    """

    def __init__(self, config: AppConfig, plan: RecordPlan) -> None:
        # here, not at the top: only an Avro output loads fastavro and the Avro writers
        from privstream.pipeline.avro import HEADER_BYTES
        from privstream.pipeline.avro_encode import AvroEncoder

        schema = output_schema(config.fields, plan)
        # the encoder frames values for a topic; a file names its schema in its header, so
        # the id is a placeholder, cut off with the rest of the frame
        self._encoder = AvroEncoder(0, schema, hash_report_fields(plan))
        self._frame = HEADER_BYTES
        self._container = ContainerWriter(schema_text(schema))

    def begin(self, out: BinaryIO) -> None:
        out.write(self._container.header())

    def release(
        self,
        plan: RecordPlan,
        lines: Sequence[bytes],
        source: NoiseSource,
        out: BinaryIO,
        reads: Names = (),  # no decode handed over: the aggregates decode their own
    ) -> BatchResult:
        result = self._encoder.encode(process_batch(plan, lines, source))
        out.write(self._container.block([value[self._frame :] for value in result.outputs]))
        return result

"""What an uncrashed worker makes of framed input (Avro, Protobuf, JSON Schema), offline.

The framed counterpart of ``worker_proc.replay_expected``: the worker's own
decode (writer schemas fetched from the registry by id), pipeline, keyed
noise (on the raw bytes as received) and output encoder, run once over all
the inputs in one batch. Noise depends on (secret, topic, partition, offset,
raw bytes) only, so a worker that was killed and replayed a batch must have
written these very bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aiokafka import ConsumerRecord
from privstream.config import load_config
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline.batch import read_names
from privstream.pipeline.formats import codec
from privstream.worker.output_schema import OutputSchema
from privstream.worker.sanitize import Sanitizer
from privstream.worker.schemas import WriterSchemas

from tests.support.worker_proc import Message


def replay_framed(
    config_path: Path,
    secret: bytes,
    coords: Sequence[tuple[int, int]],
    messages: Sequence[Message],
    output_schema_id: int,
) -> list[bytes | None]:
    """Each input's output bytes (framed with ``output_schema_id``), None for a dead letter.

    ``coords``: each message's (partition, offset) in ``kafka.input_topic``.
    """
    config = load_config(config_path)
    plan = build_plan(config)
    kafka = config.needs_kafka("run")
    assert kafka.schema_registry is not None and kafka.format != "json", "framed input only"
    keys = NoiseKeys(secret, kafka.input_topic, kafka.noise_domain)
    schemas = WriterSchemas(kafka.schema_registry, codec(kafka.format, read_names(plan, None)))
    records = [
        ConsumerRecord(
            kafka.input_topic, p, o, 0, 0, key, value, None, len(key or b""), len(value), headers
        )
        for (p, o), (key, value, headers) in zip(coords, messages, strict=True)
    ]
    result = Sanitizer(plan, keys, schemas)(records)
    output = OutputSchema.of(config, plan)
    if output is not None:
        result = output.derived.encoder(output_schema_id).encode(result)
    out: list[bytes | None] = [None] * len(records)
    for index, value in zip(result.output_index, result.outputs, strict=True):
        out[index] = value
    return out

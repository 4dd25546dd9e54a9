"""What Protobuf output costs the worker: sanitized JSON records to framed Protobuf.

    .venv/bin/python bench/protobuf_encode.py

The reference record (bench/reference.py) sanitized by ``process_batch``, then
written by the Protobuf encoder of the message derived from the config (the
class protoc makes of the derived text, as the worker builds it) and by the
Avro encoder of the derived Avro schema, on a batch of 10,000, best of 7, CPU
time of this process. docs/avro.md quotes the result.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from privstream.config import parse_config
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline.avro_encode import AvroEncoder
from privstream.pipeline.avro_schema import hash_report_fields, output_schema
from privstream.pipeline.batch import process_batch
from privstream.pipeline.noise import Replayable
from privstream.pipeline.protobuf_encode import ProtobufEncoder
from privstream.pipeline.protobuf_output import output_proto
from privstream.pipeline.protobuf_schema import ProtoSchema, parse_writer_schema

from bench.reference import BATCH, config_dict, messages, plan, print_environment


def cpu_seconds(fn: object, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        fn()  # type: ignore[operator]
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    print_environment("protobuf", "fastavro")
    as_json = messages(BATCH)
    the_plan, keys = plan(), NoiseKeys(os.urandom(32), "bench.raw")
    fields = parse_config(config_dict()).fields
    rows = np.arange(BATCH, dtype=np.int64)
    result = process_batch(the_plan, as_json, Replayable(keys, rows % 4, rows // 4, as_json))
    derived = output_proto(fields, the_plan)
    compiled = parse_writer_schema(0, derived.text)
    assert isinstance(compiled, ProtoSchema), compiled
    protobuf = ProtobufEncoder(1, compiled.message_class((0,)), derived.adapt)
    avro = AvroEncoder(1, output_schema(fields, the_plan), hash_report_fields(the_plan))
    sanitize_s = cpu_seconds(
        lambda: process_batch(the_plan, as_json, Replayable(keys, rows % 4, rows // 4, as_json)),
        7,
    )
    for name, encoder in (("protobuf", protobuf), ("avro", avro)):
        encoded = encoder.encode(result)
        assert len(encoded.outputs) == BATCH and not encoded.dead_letters
        seconds = cpu_seconds(lambda e=encoder: e.encode(result), 7)  # type: ignore[misc]
        size = sum(map(len, encoded.outputs)) / BATCH
        print(f"{name:<9} encode {seconds / BATCH * 1e6:6.2f} us/record, {size:5.1f} bytes/record")
    print(f"process_batch    {sanitize_s / BATCH * 1e6:6.2f} us/record")


if __name__ == "__main__":
    main()

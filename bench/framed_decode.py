"""What Protobuf and JSON Schema input cost the worker: the wire format to the plan's JSON.

    .venv/bin/python bench/framed_decode.py

The reference record (bench/reference.py) as Confluent-framed Protobuf (a
message class built from the .proto text by protoc, as the worker builds it)
and as framed JSON under a JSON Schema; times each format's ``to_json`` on a
batch of 10,000 next to ``process_batch`` on the same records as JSON (keyed
noise, as the worker runs it), best of 7. docs/avro.md quotes the result;
bench/avro_decode.py does the same for Avro.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import json_schema, protobuf
from privstream.pipeline.batch import process_batch, read_names
from privstream.pipeline.noise import Replayable
from privstream.pipeline.protobuf_schema import ProtoSchema

from bench.reference import BATCH, best_seconds, messages, plan, print_environment

PROTO = """
syntax = "proto3";
message Reading {
  string device_id = 1;
  int64 ts = 2;
  double temp_c = 3;
  double load_pct = 4;
  int32 events = 5;
  string network = 6;
  string country = 7;
  bool charging = 8;
}
"""
TYPES = {"string": "string", "int64": "integer", "int32": "integer", "double": "number"}
JSON_SCHEMA = {
    "type": "object",
    "properties": {
        line.split()[1]: {"type": TYPES.get(line.split()[0], "boolean")}
        for line in PROTO.splitlines()
        if line.endswith(";") and "=" in line
    },
    "required": ["device_id", "ts", "temp_c"],
}


def main() -> None:
    print_environment("protobuf", "jsonschema")
    as_json = messages(BATCH)
    proto = protobuf.parse_writer_schema(1, PROTO)
    assert isinstance(proto, ProtoSchema), proto
    reading = proto.message_class((0,))
    header = b"\x00\x00\x00\x00\x01"
    framed_pb = [header + b"\x00" + reading(**json.loads(t)).SerializeToString() for t in as_json]
    the_plan, keys = plan(), NoiseKeys(os.urandom(32), "bench.raw")
    reads = read_names(the_plan, None)
    validator = json_schema.parse_writer_schema(1, json.dumps(JSON_SCHEMA), reads=reads)
    framed_js = [header + t for t in as_json]
    rows = np.arange(BATCH, dtype=np.int64)

    def sanitize() -> object:
        return process_batch(the_plan, as_json, Replayable(keys, rows % 4, rows // 4, as_json))

    sanitize_s = best_seconds(sanitize, 7)
    for name, run in [
        ("protobuf", lambda: protobuf.to_json(framed_pb, {1: proto})),
        ("json_schema", lambda: json_schema.to_json(framed_js, {1: validator})),
    ]:
        decode_s = best_seconds(run, 7)
        print(f"{name:<12} -> json {decode_s / BATCH * 1e6:6.2f} us/record")
        print(f"{name} input costs {decode_s / sanitize_s:.2f}x the sanitization of JSON")
    print(f"process_batch      {sanitize_s / BATCH * 1e6:6.2f} us/record")


if __name__ == "__main__":
    main()

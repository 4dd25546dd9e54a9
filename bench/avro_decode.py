"""What Avro input costs the worker: the wire format decoded to the plan's JSON, per batch.

    .venv/bin/python bench/avro_decode.py

The reference record (bench/reference.py) as Confluent-framed Avro; times
``privstream.pipeline.avro.to_json`` (fastavro's schemaless reader, then orjson)
on a batch of 10,000, next to ``process_batch`` on the same records as JSON
(keyed noise, as the worker runs it), best of 7. docs/avro.md quotes the result.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastavro import schemaless_writer
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline.avro import parse_writer_schema, to_json
from privstream.pipeline.batch import process_batch
from privstream.pipeline.noise import Replayable

from bench.reference import BATCH, best_seconds, messages, plan, print_environment

SCHEMA = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "device_id", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "temp_c", "type": "double"},
        {"name": "load_pct", "type": "double"},
        {"name": "events", "type": "int"},
        {"name": "network", "type": "string"},
        {"name": "country", "type": "string"},
        {"name": "charging", "type": "boolean"},
    ],
}


def main() -> None:
    print_environment("fastavro")
    parsed = parse_writer_schema(1, json.dumps(SCHEMA))
    as_json = messages(BATCH)
    framed = []
    for text in as_json:
        out = io.BytesIO()
        schemaless_writer(out, parsed, json.loads(text))
        framed.append(b"\x00\x00\x00\x00\x01" + out.getvalue())
    the_plan, keys = plan(), NoiseKeys(os.urandom(32), "bench.raw")
    rows = np.arange(BATCH, dtype=np.int64)

    def sanitize() -> object:
        return process_batch(the_plan, as_json, Replayable(keys, rows % 4, rows // 4, as_json))

    decode_s = best_seconds(lambda: to_json(framed, {1: parsed}), 7)
    sanitize_s = best_seconds(sanitize, 7)
    print(f"avro -> json   {decode_s / BATCH * 1e6:6.2f} us/record")
    print(f"process_batch  {sanitize_s / BATCH * 1e6:6.2f} us/record")
    print(f"avro input costs {decode_s / sanitize_s:.2f}x the sanitization of JSON")


if __name__ == "__main__":
    main()

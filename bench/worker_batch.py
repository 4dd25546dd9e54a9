"""The worker's CPU per batch, stage by stage, outside Kafka (for callgrind or a profiler).

Batches of ``--batch`` nested records (``bench/reference.py``) go through what
``privstream run`` does with each: ``fetch`` reads the record batches a broker sends
into ``ConsumerRecord`` objects (aiokafka's reader behind privstream's tolerant one, as
the worker's fetcher does), ``sanitize`` is the worker's ``sanitize`` (``--passthrough``:
the pass-through worker's orjson decode + encode), ``produce`` writes the outputs with
their headers as record batches, as ``BatchSender.send`` does, and builds them.
The set-up (``--setup`` batches generated, fetched and sanitized) is the same whatever
``--batches`` (at most ``--setup``) says, and ``--batches 0`` runs it only: callgrind's
instructions for N batches less those for 0 are what the stages cost, deterministic on a
shared machine, unlike its time.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from privstream.config import parse_config
from privstream.kafka.compat import BatchBuilder, ConsumerRecord, fetcher
from privstream.kafka.decode import tolerate_undecodable_records
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import BatchResult
from privstream.worker.output_batch import encoded_headers, output_batches
from privstream.worker.produce import output_headers
from privstream.worker.sanitize import sanitize

from bench.reference import nested_config, nested_messages

#: aiokafka's default batch size, the producer's and so the record batches a fetch returns
FETCHED_BYTES = 16_384
#: the worker's record batches for the sanitized topic (``clients.MAX_BATCH_BYTES``)
BATCH_BYTES = 2**20
TOPIC = "bench.raw"
_PARTITION = attrgetter("partition")


def _builder() -> BatchBuilder:
    return BatchBuilder(FETCHED_BYTES, 0, is_transactional=1)


def fetched(messages: Sequence[bytes], base: int) -> bytes:
    """The messages as one partition's fetched bytes: v2 record batches from offset ``base``."""
    out, builder, first = bytearray(), _builder(), base
    for offset, value in enumerate(messages, base):
        if builder.append(timestamp=None, key=None, value=value, headers=[]) is None:
            out += _at(builder, first)
            builder, first = _builder(), offset
            builder.append(timestamp=None, key=None, value=value, headers=[])
    return bytes(out + _at(builder, first))


def _at(builder: BatchBuilder, base: int) -> bytes:
    built = bytearray(builder._build())
    built[:8] = base.to_bytes(8, "big")  # the base offset is outside the CRC
    return bytes(built)


def fetch(data: bytes) -> list[ConsumerRecord]:
    tp = fetcher.TopicPartition(TOPIC, 0)
    records = fetcher.MemoryRecords(data)
    return list(fetcher.PartitionRecords(tp, records, [], 0, None, None, True, 1))


def produce(records: Sequence[ConsumerRecord], result: BatchResult, headers: Any) -> int:
    """``BatchSender.send``'s batches (one output partition) written and built: their bytes."""
    index = np.asarray(result.output_index, dtype=np.int64)
    inputs = np.fromiter(map(_PARTITION, records), dtype=np.int64, count=len(records))
    _ = inputs[index] % 4  # the output partitions
    values = list(result.outputs)
    tail = encoded_headers(headers)
    batches = output_batches(
        values, [tail] * len(values), max_bytes=BATCH_BYTES, transactional=True
    )
    return sum(len(batch._build()) for batch in batches)


def passthrough(records: Sequence[ConsumerRecord]) -> BatchResult:
    loads, dumps = orjson.loads, orjson.dumps
    outputs = [dumps(loads(r.value)) for r in records]
    return BatchResult(outputs=outputs, output_index=list(range(len(records))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--setup", type=int, default=2)
    parser.add_argument("--stages", default="fetch,sanitize,produce")
    parser.add_argument("--passthrough", action="store_true")
    args = parser.parse_args()
    stages = set(args.stages.split(","))
    tolerate_undecodable_records()
    plan = build_plan(parse_config(nested_config()))
    keys = NoiseKeys(b"k" * 32, TOPIC)
    headers = output_headers(plan)
    inputs = [
        fetched(nested_messages(args.batch, start=i * args.batch), i * args.batch)
        for i in range(args.setup)
    ]
    ready = [fetch(data) for data in inputs]  # for the stages after a fetch not measured
    results = [sanitize(plan, keys, records) for records in ready]
    started = time.process_time()
    for i in range(args.batches):
        records = fetch(inputs[i]) if "fetch" in stages else ready[i]
        if "sanitize" in stages:
            result = passthrough(records) if args.passthrough else sanitize(plan, keys, records)
        else:
            result = results[i]
        if "produce" in stages:
            produce(records, result, headers)
    spent = time.process_time() - started
    per = spent / max(args.batches * args.batch, 1) * 1e6
    print(f"{args.batches} batches of {args.batch}: {spent:.3f} CPU s, {per:.2f} µs a record")
    return 0


if __name__ == "__main__":
    sys.exit(main())

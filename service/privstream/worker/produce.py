"""What one processed batch turns into on the broker: sanitized messages and dead letters.

Pure except for the producer calls: given the raw records and
``process_batch``'s result, queue every output on the producer. Sanitized
messages go through aiokafka's batch API: each output partition's record
batches are written whole (``output_batch``: one C loop a batch, the
headers encoded once) and queued with ``send_batch``. The output partition
is the input partition modulo the output topic's partition count: deterministic (a
replay lands where the first copy did) and order-preserving (one input
partition feeds one output partition, in offset order).

A message too large for ``kafka.max_message_bytes`` never blocks its
partition: a sanitized record that is too large becomes a dead letter, a
dead letter that is too large goes out without its raw value (the source
header says where to find it). Dead letters are rare and keep
``producer.send`` (partitioned by the raw key, as before).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping, Sequence
from operator import attrgetter

import numpy as np
import numpy.typing as npt
from aiokafka import AIOKafkaProducer, ConsumerRecord
from aiokafka.errors import MessageSizeTooLargeError

from privstream.kafka.compat import DefaultRecordBatchBuilder
from privstream.pipeline import BatchResult, RecordPlan
from privstream.pipeline.results import DeadLetter
from privstream.worker.output_batch import encoded_headers, output_batches
from privstream.worker.record_batch import BuiltBatch

Headers = list[tuple[str, bytes]]
#: the most a value's length varint can add over the estimate for an empty value
_VARINT_BYTES = 5
_PARTITION = attrgetter("partition")


def output_headers(plan: RecordPlan) -> Headers:
    """Headers of every sanitized message: the config and release hashes, the guarantee."""
    return [
        ("privstream-config-sha256", plan.config_sha256.encode()),
        ("privstream-release-sha256", plan.release_sha256.encode()),
        ("privstream-field-releases", field_releases_header(plan)),
        ("privstream-epsilon", repr(plan.epsilon).encode()),
        ("privstream-delta", repr(plan.delta).encode()),
    ]


def field_releases_header(plan: RecordPlan) -> bytes:
    """``{"name": "release id prefix", ...}``, compact JSON: ``estimate`` matches by it."""
    return json.dumps(plan.field_releases, separators=(",", ":"), sort_keys=True).encode()


def source_of(record: ConsumerRecord) -> str:
    return f"{record.topic}/{record.partition}/{record.offset}"


def dead_letter_headers(record: ConsumerRecord, reason: str, detail: str) -> Headers:
    """The raw record's own headers plus why and where it failed."""
    own: Headers = list(record.headers or ())
    return [
        *own,
        ("privstream-reason", reason.encode()),
        ("privstream-detail", detail.encode()),
        ("privstream-source", source_of(record).encode()),
    ]


class BatchSender:
    """Queues a batch's messages on a producer and waits for their acknowledgements."""

    def __init__(
        self,
        producer: AIOKafkaProducer,
        plan: RecordPlan,
        output: str,
        dead_letter: str,
        *,
        max_message_bytes: int,
        batch_bytes: int,
        transactional: bool,
        extra_headers: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        self._producer = producer
        self._headers = [*output_headers(plan), *extra_headers]
        self._tail = encoded_headers(self._headers)
        self._output = output
        self._dead_letter = dead_letter
        self._max_bytes = max_message_bytes
        self._batch_bytes = batch_bytes
        self._transactional = transactional
        # values up to this length fit for sure; longer ones get the producer's exact estimate
        empty = DefaultRecordBatchBuilder.estimate_size_in_bytes(None, b"", self._headers)
        self._surely_fits = max_message_bytes - empty - _VARINT_BYTES

    async def send(
        self,
        records: Sequence[ConsumerRecord],
        result: BatchResult,
        record_headers: Mapping[int, Headers] | None = None,
    ) -> list[DeadLetter]:
        """Send everything; returns the dead letters actually written (with oversize ones).

        ``record_headers``: more headers for the messages of some records (by index).
        """
        partitions = sorted(await self._producer.partitions_for(self._output))
        dead = list(result.dead_letters)
        more = {i: self._with(h) for i, h in (record_headers or {}).items()}
        index = np.asarray(result.output_index, dtype=np.int64)
        kept = self._fitting(result.outputs, index, more, dead)
        values = list(map(result.outputs.__getitem__, kept.tolist()))
        tails = [self._tail] * len(values)
        for at in np.flatnonzero(np.isin(index[kept], list(more))).tolist():
            tails[at] = encoded_headers(more[int(index[kept[at]])][0])
        inputs = np.fromiter(map(_PARTITION, records), dtype=np.int64, count=len(records))
        # the input partition modulo the output count: a replay lands where the first did
        targets = np.asarray(partitions, dtype=np.int64)[inputs[index[kept]] % len(partitions)]
        chains = {
            int(target): output_batches(
                list(map(values.__getitem__, picks)),
                list(map(tails.__getitem__, picks)),
                max_bytes=self._batch_bytes,
                transactional=self._transactional,
            )
            for target, picks in _by_target(targets)
        }
        pending = await self._submit(chains)
        pending.extend([await self._dead_letter_send(records[d.index], d) for d in dead])
        await asyncio.gather(*pending)
        return dead

    def _fitting(
        self,
        outputs: Sequence[bytes],
        index: npt.NDArray[np.int64],
        more: Mapping[int, tuple[Headers, int]],
        dead: list[DeadLetter],
    ) -> npt.NDArray[np.int64]:
        """The positions of the outputs that fit ``max_message_bytes`` with their headers;
        each other one becomes an ``output_too_large`` dead letter in ``dead``."""
        lengths = np.fromiter(map(len, outputs), dtype=np.int64, count=len(outputs))
        least = min([self._surely_fits, *(fits for _, fits in more.values())])
        too_large = []
        for at in np.flatnonzero(lengths > least).tolist():  # rare: the exact check
            headers, fits = more.get(int(index[at]), (self._headers, self._surely_fits))
            value = outputs[at]
            if len(value) > fits and self._too_large(value, headers):
                detail = (
                    f"sanitized record of {len(value)} bytes exceeds "
                    "kafka.max_message_bytes; raise it (and the topic's max.message.bytes)"
                )
                dead.append(DeadLetter(int(index[at]), "output_too_large", detail))
                too_large.append(at)
        return np.delete(np.arange(len(outputs), dtype=np.int64), too_large)

    def _with(self, extra: Headers) -> tuple[Headers, int]:
        """The headers with ``extra`` added, and the value length that surely fits then."""
        added = sum(len(k) + len(v) + 2 * _VARINT_BYTES for k, v in extra)
        return [*self._headers, *extra], self._surely_fits - added

    def _too_large(self, value: bytes, headers: Headers | None = None) -> bool:
        """The producer's own check for ``send`` (its ``max_request_size``)."""
        size = DefaultRecordBatchBuilder.estimate_size_in_bytes(
            None, value, self._headers if headers is None else headers
        )
        return bool(size > self._max_bytes)

    async def _submit(self, chains: dict[int, list[BuiltBatch]]) -> list[asyncio.Future[object]]:
        """Queue every batch, the n-th of each partition before any (n+1)-th.

        The producer holds one queued batch per partition: queuing a second
        waits until the first is drained, so interleaving the partitions lets
        those waits overlap.
        """
        pending: list[asyncio.Future[object]] = []
        send = self._producer.send_batch
        for depth in range(max((len(c) for c in chains.values()), default=0)):
            for target, chain in sorted(chains.items()):
                if depth < len(chain):
                    pending.append(await send(chain[depth], self._output, partition=target))
        return pending

    async def _dead_letter_send(
        self, raw: ConsumerRecord, letter: DeadLetter
    ) -> asyncio.Future[object]:
        """The raw record as a dead letter; what is too large is left at the source.

        Tried in turn: the whole record; without its value; without its value,
        key and raw headers (those may be what is too large). The
        ``privstream-source`` header always says where the raw record is.
        """
        note = f"{letter.detail}; raw record too large to copy here, read it at the source"
        full = dead_letter_headers(raw, letter.reason, letter.detail)
        short = dead_letter_headers(raw, letter.reason, note)
        attempts = [(raw.value, raw.key, full), (b"", raw.key, short), (b"", None, short[-3:])]
        for value, key, headers in attempts[:-1]:
            try:
                future: asyncio.Future[object] = await self._producer.send(
                    self._dead_letter, value=value, key=key, headers=headers
                )
            except MessageSizeTooLargeError:
                continue
            return future
        value, key, headers = attempts[-1]
        last: asyncio.Future[object] = await self._producer.send(
            self._dead_letter, value=value, key=key, headers=headers
        )
        return last


def _by_target(targets: npt.NDArray[np.int64]) -> Iterator[tuple[int, list[int]]]:
    """Each output partition with the positions of its messages, in order (the input's
    order within a partition is kept)."""
    for target in np.unique(targets).tolist():
        yield target, np.flatnonzero(targets == target).tolist()

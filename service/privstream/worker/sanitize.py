"""A batch of consumed records through ``process_batch``, poison records isolated.

Pure (no Kafka calls, no metrics): the worker runs it in a thread while the
previous batch's transaction commits (``loop``). Each record's noise is
keyed on (secret, topic, partition, offset, raw bytes, field release), so a
record sanitized again, alone or in any batch, gets the very same bytes.
``Sanitizer`` is what the worker runs (``Sanitize``: tests inject their own);
``Prepared`` is such a batch waiting for its transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np
from aiokafka import ConsumerRecord, TopicPartition

from privstream.config import KafkaConfig
from privstream.config.runtime import Runtime
from privstream.kafka.decode import UndecodableRecord
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import BatchResult, RecordPlan, process_batch
from privstream.pipeline.batch import read_names
from privstream.pipeline.formats import codec
from privstream.pipeline.noise import Replayable
from privstream.pipeline.results import DeadLetter, Observation, merge_observations
from privstream.worker.produce import source_of
from privstream.worker.schemas import WriterSchemas, as_received

if TYPE_CHECKING:
    from privstream.worker.ledger_store import Verdict

log = logging.getLogger("privstream.worker")
UNDECODABLE_DETAIL = (
    "a header key is not UTF-8, so the Kafka client cannot decode the record; its headers "
    "are copied here with such keys escaped (\\xNN), key and value as they are"
)


#: what the worker sanitizes a batch with (in a thread, so it must be pure)
Sanitize = Callable[[Sequence[ConsumerRecord]], BatchResult]


@dataclass(frozen=True)
class Sanitizer:
    """A worker's ``Sanitize``: framed input (Avro, Protobuf, JSON Schema) decoded with its
    writer schemas, then ``sanitize``."""

    plan: RecordPlan
    keys: NoiseKeys
    #: framed input's writer schemas (None: the input is JSON)
    schemas: WriterSchemas | None = None
    #: the subject field (``privacy.subject``) when there is a ledger
    subject: str | None = None

    @classmethod
    def for_input(
        cls, kafka: KafkaConfig, plan: RecordPlan, runtime: Runtime, subject: str | None
    ) -> Sanitizer:
        """The sanitizer of ``kafka.input_topic``'s records, keyed on ``runtime``'s secret."""
        keys = NoiseKeys(runtime.noise_secret, kafka.input_topic, kafka.noise_domain)
        registry, framed = kafka.schema_registry, kafka.format != "json"
        schemas = (
            WriterSchemas(registry, codec(kafka.format, read_names(plan, subject)))
            if framed and registry is not None
            else None
        )
        return cls(plan, keys, schemas, subject)

    def __call__(self, records: Sequence[ConsumerRecord]) -> BatchResult:
        if self.schemas is not None:  # framed input: the plan reads it as JSON
            records = self.schemas.decode(records)
        return sanitize(self.plan, self.keys, records, self.subject)


@dataclass(frozen=True)
class Prepared:
    """A fetched and sanitized batch, waiting for its transaction."""

    owned: dict[TopicPartition, list[ConsumerRecord]]
    records: list[ConsumerRecord]
    result: BatchResult
    #: the assignment it was fetched under (``Assignment.generation``)
    generation: int
    started: float
    #: the ledger's charge of it (``charging.charge``); None without a ledger or once voided
    verdict: Verdict | None = None
    #: ``time.perf_counter()`` once sanitized: from then on it waits for its transaction
    ready: float = 0.0

    @property
    def offsets(self) -> dict[TopicPartition, int]:
        return {tp: msgs[-1].offset + 1 for tp, msgs in self.owned.items()}


def sanitize(
    plan: RecordPlan,
    keys: NoiseKeys,
    records: Sequence[ConsumerRecord],
    subject: str | None = None,
) -> BatchResult:
    """Records the client could not decode are dead letters; the others are sanitized.

    ``subject``: the subject field, whose value per output ``result.subjects`` holds.
    """
    # the distinct types first (one C loop): a batch seldom holds one it could not decode
    if not any(issubclass(kind, UndecodableRecord) for kind in set(map(type, records))):
        return _sanitize_decoded(plan, keys, records, subject)
    poison = [i for i, r in enumerate(records) if isinstance(r, UndecodableRecord)]
    for i in poison:
        log.error("record %s cannot be decoded (%s)", source_of(records[i]), records[i].problem)
    skipped = set(poison)
    keep = [i for i in range(len(records)) if i not in skipped]
    part = _sanitize_decoded(plan, keys, [records[i] for i in keep], subject)
    result = BatchResult(
        outputs=part.outputs,
        output_index=[keep[i] for i in part.output_index],
        observations=part.observations,
        subjects=part.subjects,
    )
    result.dead_letters.extend(
        DeadLetter(keep[d.index], d.reason, d.detail) for d in part.dead_letters
    )
    result.dead_letters.extend(
        DeadLetter(i, records[i].problem, getattr(records[i], "detail", UNDECODABLE_DETAIL))
        for i in poison
    )
    result.dead_letters.sort(key=lambda d: d.index)
    return result


_PARTITION, _OFFSET, _KEY = attrgetter("partition"), attrgetter("offset"), attrgetter("key")
_VALUE = attrgetter("value")


def _noise(
    keys: NoiseKeys, records: Sequence[ConsumerRecord], values: Sequence[bytes]
) -> Replayable:
    partitions = np.fromiter(map(_PARTITION, records), np.int64, len(records))
    offsets = np.fromiter(map(_OFFSET, records), np.int64, len(records))
    return Replayable(keys, partitions, offsets, as_received(records, values))


def _sanitize_decoded(
    plan: RecordPlan, keys: NoiseKeys, records: Sequence[ConsumerRecord], subject: str | None
) -> BatchResult:
    """``process_batch``; a record that breaks it is dead-lettered alone, never retried."""
    values = list(map(_VALUE, records))
    if None in values:  # a tombstone (no value) is read as empty bytes, as before
        values = [value or b"" for value in values]
    ids = list(map(_KEY, records))  # the trusted device identity of key-memoized fields
    try:
        return process_batch(plan, values, _noise(keys, records, values), ids, subject=subject)
    except Exception as exc:  # a bug in a handler must not block the partition
        log.error("batch failed (%s); sanitizing its records one by one", type(exc).__name__)
    result = BatchResult(subjects=None if subject is None else [])
    parts: list[dict[str, Observation]] = []
    for index, record in enumerate(records):
        try:
            one_value = values[index : index + 1]
            one = process_batch(
                plan,
                one_value,
                _noise(keys, [record], one_value),
                ids[index : index + 1],
                subject=subject,
            )
        except Exception as exc:  # isolate the poison record
            log.error("record %s cannot be sanitized (%s)", source_of(record), type(exc).__name__)
            detail = f"internal error ({type(exc).__name__}) while sanitizing; please report"
            result.dead_letters.append(DeadLetter(index, "internal_error", detail))
            continue
        result.outputs.extend(one.outputs)
        result.output_index.extend(index for _ in one.outputs)
        if result.subjects is not None:
            result.subjects.extend(one.subjects or ())
        result.dead_letters.extend(DeadLetter(index, d.reason, d.detail) for d in one.dead_letters)
        parts.append(one.observations)
    result.observations.update(merge_observations(parts))
    return result

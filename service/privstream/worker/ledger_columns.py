"""The columns a batch's charge reads: each released record's partition, key, timestamp
(the Kafka timestamp, or the released time of ``privacy.ledger.time``) and subject,
checked before anything is charged.

A column that does not line up with its records would charge records to
another subject or another partition's ledger, so each is checked where it
is taken (``check_partitions``, ``subjects_in_order``): a mismatch is a
``LedgerError`` (a bug), never a guess. ``misplaced`` finds the records a
writer put on another partition than their key's.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from operator import attrgetter, getitem
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import orjson
from aiokafka import ConsumerRecord

from privstream.config.paths import split_path
from privstream.errors import LedgerError
from privstream.kinds.timestamp import TimestampHandler
from privstream.pipeline import BatchResult, RecordPlan
from privstream.worker.partitioner import partitions_of


def subjects_in_order(
    result: BatchResult, order: npt.NDArray[np.intp], field: str
) -> Sequence[bytes | None]:
    """Each output's subject in input order, from the pipeline's decode when it read them."""
    if result.subjects is None:  # sanitized without ``subject=``: a bug, never guessed
        raise LedgerError(
            f"a batch of {len(result.outputs)} outputs reached the ledger without its "
            f"subject column ({field!r}): refusing to charge it (please report)"
        )
    if len(result.subjects) != len(order):  # a shifted column charges the wrong subjects
        raise LedgerError(
            f"a batch of {len(order)} outputs came with {len(result.subjects)} subjects "
            f"({field!r}): refusing to charge it (please report)"
        )
    if len(order) and not (order[1:] > order[:-1]).all():
        return [result.subjects[i] for i in order.tolist()]
    return result.subjects


def misplaced(
    partition: int, keys: Sequence[bytes | None], count: int | None
) -> npt.NDArray[np.bool_]:
    """Records whose key Kafka's default partitioner (murmur2) puts on another partition.

    One partition holds each subject's ledger only if every writer partitions by
    the key the way Kafka's Java client and aiokafka do (librdkafka clients: set
    ``partitioner=murmur2_random``); a record elsewhere would be charged to a second
    ledger of the same subject.
    """
    wrong = np.zeros(len(keys), dtype=bool)
    if count is None or not keys:
        return wrong
    if None not in keys:  # usual: every record keyed
        return cast(
            npt.NDArray[np.bool_],
            partitions_of(cast(Sequence[bytes], keys), count) != partition,
        )
    keyed = [i for i, key in enumerate(keys) if key is not None]  # no key: subject check
    if not keyed:
        return wrong
    homes = partitions_of([cast(bytes, keys[i]) for i in keyed], count)
    wrong[keyed] = homes != partition
    return wrong


def check_partitions(records: Sequence[ConsumerRecord], partitions: npt.NDArray[np.int64]) -> None:
    """One partition per record, matching the records at each run's ends (a few reads):
    a shifted column would charge records to another partition's ledger."""
    n, ends = len(records), np.flatnonzero(np.diff(partitions))
    probes = {0, n - 1, *ends.tolist(), *(ends + 1).tolist()} if n else set()
    if len(partitions) != n or any(records[i].partition != partitions[i] for i in probes):
        raise LedgerError(
            f"a batch of {n} records came with {len(partitions)} partitions that do not "
            "match them: refusing to charge it (please report)"
        )


class EventTime:
    """``privacy.ledger.time``: each output's released time, in epoch milliseconds.

    Read back from the sanitized output itself, never from the raw record: the window a
    record is charged to is then a function of what the output shows (the field is a
    timestamp released without noise, config load checks it), so the release decision
    reads no value the output does not publish.
    """

    def __init__(self, handler: TimestampHandler) -> None:
        self.field = handler.name
        self._keys = split_path(handler.name)  # a nested time: its path (``device.seen_at``)
        self._handler = handler

    def __call__(self, outputs: Sequence[bytes]) -> npt.NDArray[np.int64]:
        try:
            values = [reduce(getitem, self._keys, orjson.loads(output)) for output in outputs]
            return self._handler.starts_ms(values)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise LedgerError(
                f"a batch of {len(outputs)} outputs has one whose {self.field!r} "
                f"(privacy.ledger.time) cannot be read back ({exc}): refusing to charge it "
                "(please report)"
            ) from None

    @classmethod
    def of(cls, plan: RecordPlan, field: str) -> EventTime:
        """The time field's handler in ``plan`` (config load checked its kind)."""
        handler = next((h for h in plan.handlers if h.name == field), None)
        if not isinstance(handler, TimestampHandler):
            raise LedgerError(f"privacy.ledger.time {field!r} is no timestamp field of the plan")
        return cls(handler)


class Columns:
    """The columns ``SubjectLedger.charge`` reads of a batch's released records, in input
    order, taken from the records once per batch."""

    def __init__(
        self,
        records: Sequence[ConsumerRecord],
        result: BatchResult,
        partitions: npt.NDArray[np.int64],
        subject_field: str,
        event_time: EventTime | None = None,
    ) -> None:
        check_partitions(records, partitions)
        index = _output_index(result, len(records))
        #: outputs in input order (``order``) and the record of each (``index``)
        self.order = np.argsort(index, kind="stable")
        self.index = index[self.order]
        every = len(index) == len(records) and bool((index[1:] > index[:-1]).all())
        # usual: every record released, in order (``index`` is then 0..n-1: n increasing
        # values in 0..n-1)
        released = records if every else list(map(records.__getitem__, self.index.tolist()))
        self.partitions = partitions[self.index]
        if event_time is None:  # windows follow the Kafka timestamp
            self._timestamps = np.fromiter(map(_TIMESTAMP, released), np.int64, len(released))
        else:  # the released time, read in output order
            self._timestamps = event_time(result.outputs)[self.order]
        self._keys: list[bytes | None] = list(map(_KEY, released))
        self._subjects = subjects_in_order(result, self.order, subject_field)

    def rows(self, rows: npt.NDArray[np.intp]) -> dict[str, Any]:
        """``charge``'s keyword arguments for these rows (a slice when contiguous: usual)."""
        if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
            take: Any = slice(int(rows[0]), int(rows[-1]) + 1)
            subjects, keys = self._subjects[take], self._keys[take]
        else:
            picks = rows.tolist()
            subjects = list(map(self._subjects.__getitem__, picks))
            keys = list(map(self._keys.__getitem__, picks))
        return {"subjects": subjects, "keys": keys, "timestamps_ms": self._timestamps[rows]}


def _output_index(result: BatchResult, records: int) -> npt.NDArray[np.int64]:
    """Each output's record, every one in the batch: a negative position would wrap and
    pair one record's key and timestamp with another's partition."""
    index = np.asarray(result.output_index, dtype=np.int64)
    if len(index) and not 0 <= index.min() <= index.max() < records:
        raise LedgerError(
            f"a batch of {records} records came with an output index from {index.min()} to "
            f"{index.max()}: refusing to charge it (please report)"
        )
    return index


_TIMESTAMP = attrgetter("timestamp")
_KEY = attrgetter("key")

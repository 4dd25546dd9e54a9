"""Records the Kafka client cannot decode become dead letters; a batch it cannot read stops
its partition right before it, reported, never skipped.

aiokafka decodes every header key as UTF-8 while it reads a fetched batch
(``DefaultRecord`` header keys are ``str``). One record whose header key is
not UTF-8 (``kcat -H $'\\xff\\xfekey=val'``) raises ``UnicodeDecodeError``
inside ``getmany``: the good records fetched with it are lost to that call,
the consumer's position stops at the bad offset, and every later fetch
raises again. A worker that exits on it crash-loops, and so does every
replica that takes the partition over.

``tolerate_undecodable_records`` makes the fetcher build its record sets
with ``_TolerantRecords``: batches are read by aiokafka's own (C) reader as
before, and only when one raises ``UnicodeDecodeError`` is that batch read
again by ``_read_records`` here, which decodes header keys with
``backslashreplace`` (``\\xff`` for a byte that is not UTF-8) and marks
such records. The consumer returns them as ``UndecodableRecord`` (a
``ConsumerRecord`` with a ``problem``), in their place in the partition:
the worker dead-letters them with the transaction that commits their
offset, and the records around them are released as usual.

A whole batch that cannot be read (a bad CRC, a codec that is not
installed, a corrupt compressed payload) is different: its records are
unknown, so none can be dead-lettered in its place. aiokafka raises from
``getmany``, losing the records it had taken with it, and a session
restarted on it loops forever. Here the partition stops right before it:
the records before it are returned, then ``getmany`` raises
``UndecodableBatchError`` (topic, partition, offset) once, at a call that
takes no record, and the consumer's position stays at the batch; the worker
reports it and retries (``privstream.worker.stalls``).

This reaches into aiokafka (``fetcher.MemoryRecords``, ``PartitionRecords``
and ``FetchResult``, the pure-Python batch reader's buffer); it is checked
against the installed version at install time and by the integration test
with hostile headers produced by kcat.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from privstream.errors import UndecodableBatchError
from privstream.kafka.compat import ConsumerRecord, _DefaultRecordBatchPy, decode_varint, fetcher
from privstream.kafka.compat import MemoryRecords as _OriginalRecords

#: the dead-letter reason of a record whose header key is not UTF-8
UNDECODABLE_HEADER = "undecodable_header"
_FRAME = 12  # base offset (int64) + batch length (int32): the same in every message format


@dataclass
class UndecodableRecord(ConsumerRecord):  # type: ignore[misc]
    """A record whose bytes the client could not decode; its headers are escaped."""

    problem: str = UNDECODABLE_HEADER


@dataclass(frozen=True)
class _Record:
    """One record read by ``_read_records`` (the fields ``PartitionRecords`` reads)."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    undecodable: bool
    checksum: None = None


def _nullable(buffer: bytearray, pos: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(buffer, pos)
    if length < 0:
        return None, pos
    return bytes(buffer[pos : pos + length]), pos + length


def _read_records(raw: bytes) -> Iterator[_Record]:
    """Every record of one v2 batch, as aiokafka's ``_read_msg`` reads them but tolerant.

    Same layout (Kafka protocol, "Record"): length, attributes, timestamp
    delta, offset delta, key, value, headers ``[key String, value Bytes]``.
    """
    batch = _DefaultRecordBatchPy(raw)
    batch._maybe_uncompress()  # private: the reader has no public way to the records
    buffer, pos = batch._buffer, batch._pos
    log_append = batch.timestamp_type == batch.LOG_APPEND_TIME
    for _ in range(batch._num_records):
        _, pos = decode_varint(buffer, pos)  # length
        _, pos = decode_varint(buffer, pos)  # attributes
        ts_delta, pos = decode_varint(buffer, pos)
        offset_delta, pos = decode_varint(buffer, pos)
        key, pos = _nullable(buffer, pos)
        value, pos = _nullable(buffer, pos)
        count, pos = decode_varint(buffer, pos)
        headers: list[tuple[str, bytes | None]] = []
        undecodable = False
        for _ in range(max(count, 0)):
            name, pos = _nullable(buffer, pos)
            header_value, pos = _nullable(buffer, pos)
            try:
                text = (name or b"").decode("utf-8")
            except UnicodeDecodeError:
                text, undecodable = (name or b"").decode("utf-8", "backslashreplace"), True
            headers.append((text, header_value))
        yield _Record(
            offset=batch.base_offset + offset_delta,
            timestamp=batch.max_timestamp if log_append else batch.first_timestamp + ts_delta,
            timestamp_type=batch.timestamp_type,
            key=key,
            value=value,
            headers=headers,
            undecodable=undecodable,
        )


class _TolerantBatch:
    """A batch read by aiokafka's reader until it fails to decode, then by ``_read_records``.

    ``data[start:end]`` holds the batch's bytes; they are copied only on that failure.
    """

    def __init__(self, batch: Any, data: bytes, start: int, end: int) -> None:
        self._batch = batch
        self._span = (data, start, end)
        self._records = self._generate()

    def __getattr__(self, name: str) -> Any:  # offsets, flags, validate_crc, ...
        return getattr(self._batch, name)

    def __iter__(self) -> Iterator[Any]:
        # the generator itself, so a ``for`` over the batch makes no call of ours per record
        return self._records

    def __next__(self) -> Any:  # a control batch's marker (``_contains_abort_marker``)
        return next(self._records)

    def _generate(self) -> Iterator[Any]:
        last = -1
        try:
            for record in self._batch:
                last = record.offset
                yield record
        except UnicodeDecodeError:  # only header keys are decoded; read the rest here
            data, start, end = self._span
            yield from (r for r in _read_records(data[start:end]) if r.offset > last)


class _TolerantRecords:
    """aiokafka's ``MemoryRecords`` whose batches are ``_TolerantBatch``es."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._inner = _OriginalRecords(data)
        self._pos = 0

    def size_in_bytes(self) -> int:
        return int(self._inner.size_in_bytes())

    def has_next(self) -> bool:
        return bool(self._inner.has_next())

    def next_batch(self) -> _TolerantBatch | None:
        batch = self._inner.next_batch()
        if batch is None:
            return None
        start = self._pos
        length = int.from_bytes(self._data[start + 8 : start + _FRAME], "big", signed=True)
        self._pos = start + _FRAME + length
        return _TolerantBatch(batch, self._data, start, self._pos)


#: aiokafka's own, called without ``super()``'s lookup per record
_consumer_record = fetcher.PartitionRecords._consumer_record


class _TolerantPartitionRecords(fetcher.PartitionRecords):  # type: ignore[misc]
    #: why the batch at ``next_fetch_offset`` cannot be read, once one cannot
    failure: UndecodableBatchError | None = None

    def _unpack_records(self) -> Iterator[Any]:
        """aiokafka's records up to the first batch it cannot read, then the end.

        Anything a batch's bytes raise (a CRC mismatch, a codec that is not
        installed, a truncated or corrupt compressed payload, a malformed
        record) ends the records here, with ``next_fetch_offset`` (the
        position the consumer moves to) right after the last record returned:
        the batch is never skipped, and ``_StoppingFetchResult`` raises the
        error from the consumer's next ``getmany`` that takes no record.
        """
        try:
            yield from super()._unpack_records()
        except Exception as exc:  # every decode failure stops here
            tp = self._tp
            self.failure = UndecodableBatchError(
                tp.topic, tp.partition, self.next_fetch_offset, exc
            )

    def _consumer_record(self, tp: Any, record: Any) -> Any:
        made = _consumer_record(self, tp, record)
        # by exact type: a ``getattr`` default raised and caught an AttributeError per record
        if type(record) is not _Record or not record.undecodable:
            return made
        fields = {name: getattr(made, name) for name in made.__dataclass_fields__}
        return UndecodableRecord(**fields)


class _StoppedFetch(fetcher.FetchError):  # type: ignore[misc]
    """A partition stopped before a batch it cannot read: aiokafka's own fetch error.

    ``fetched_records`` raises a fetch error only from a ``getmany`` that has
    taken no record yet (one that has returns them, and raises next time), so
    raising it loses nothing. It stays in the fetcher's buffer until raised
    (``has_more``), so the partition is not fetched again before that.
    """

    def has_more(self) -> bool:
        return True


class _StoppingFetchResult(fetcher.FetchResult):  # type: ignore[misc]
    """aiokafka's buffered fetch of one partition, which becomes a ``_StoppedFetch`` once
    its records end at a batch that cannot be read (``getmany``'s path; ``getone``, which
    privstream does not use, would drop the error and fetch the batch again)."""

    def getall(self, max_records: int | None = None) -> list[Any]:
        source = self._partition_records
        records: list[Any] = super().getall(max_records)
        failure = getattr(source, "failure", None)
        if failure is not None and self._partition_records is None:  # drained up to it
            # the fetcher tells a result from an error by its exact class
            self.__class__ = _StoppedFetch
            fetcher.FetchError.__init__(self, error=failure, backoff=0)
        return records


def tolerate_undecodable_records() -> None:
    """Install the tolerant readers in aiokafka's fetcher (idempotent)."""
    fetcher.MemoryRecords = _TolerantRecords
    fetcher.PartitionRecords = _TolerantPartitionRecords
    fetcher.FetchResult = _StoppingFetchResult

"""A restore of many subjects on a real broker: the whole ledger, without the records' memory.

The store's own restore (``LedgerStore.assigned``, then ``ready``) reads a
changelog of 160,000 records (100,000 subjects, 50,000 of them charged
twice, and a closed window's 5,000 subjects and their tombstones) in many
fetched batches, folding each as it arrives. It must give the ledger that
wrote them, and its peak above what it keeps (tracemalloc: Python's
objects, aiokafka's and numpy's arrays) must stay within the fetched
batches and the tables' growth (measured: 11 MB at 250,000 records, bound
28 MB). The restore it replaces held a Python object per record until the
end, 200 bytes a record and more (over 30 MB here).
"""

from __future__ import annotations

import gc
import tracemalloc

from aiokafka import TopicPartition
from privstream.ledger import SubjectLedger
from privstream.pipeline import BatchResult
from privstream.worker.ledger_store import Verdict

from tests.integration.test_changelog_batches import kafka, started, store_of
from tests.support.broker import create_topics
from tests.unit.ledger.test_charge import POLICY
from tests.unit.ledger.test_replay import GROWTH_SHARE

PARTITIONS = 2
#: aiokafka's share of one fetch: 10,000 records decoded and the raw bytes of the
#: partitions' fetches (1 MiB each, one ahead), on top of the fold's own batch
FETCH_ALLOWANCE = 12 * 2**20


def subjects(first: int, count: int) -> list[bytes]:
    return [b"subject-%09d" % i for i in range(first, first + count)]


async def test_a_large_restore_gives_the_ledger_and_keeps_no_object_per_record(
    kafka_bootstrap: str,
) -> None:
    config = kafka(kafka_bootstrap, transactions=True)
    writer = store_of(config)
    await create_topics(kafka_bootstrap, [writer.topic], partitions=PARTITIONS)
    ledger = SubjectLedger(policy=POLICY, deployment="tests")
    producer = await started(config)
    # (clock, first subject, count): a window closed by the next clock (its tombstones),
    # then 100,000 subjects, then 50,000 of them again (two records each)
    passes = [(40_000, 0, 5_000), (50_000, 0, 100_000), (50_100, 50_000, 50_000)]
    try:
        for now, first, count in passes:
            for start in range(first, first + count, 5_000):
                names = subjects(start, 5_000)
                partition = start // 5_000 % PARTITIONS
                charge = ledger.charge(
                    partition, subjects=names, keys=names, timestamps_ms=[now] * 5_000, now_ms=now
                )
                await producer.begin_transaction()
                verdict = Verdict(result=BatchResult(), updates={partition: charge.updates})
                await writer.send_updates(producer, verdict)
                await producer.commit_transaction()
    finally:
        await producer.stop()
    assert ledger.active_subject_windows() == 100_000

    reader = store_of(config)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        reader.assigned(TopicPartition(config.input_topic, p) for p in range(PARTITIONS))
        await reader.ready(range(PARTITIONS))
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    try:
        for p in range(PARTITIONS):
            assert reader.ledger.snapshot(p) == ledger.snapshot(p), f"partition {p}"
            assert reader.ledger.counts(p) == ledger.counts(p)
        # what the ledger keeps (a window row and a lifetime row per subject), with the
        # readers (one client each) and the metrics
        kept = current - base
        assert kept < 100_000 * 2 * 150, kept
        assert peak - base - kept <= GROWTH_SHARE * kept + FETCH_ALLOWANCE, (peak - base, kept)
    finally:
        await reader.close()

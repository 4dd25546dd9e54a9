"""``Columns``: each released output's partition, key, timestamp and subject, in input order,
whatever the pipeline released (all in order, a subset, reordered, one record twice)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from aiokafka import ConsumerRecord
from privstream.errors import LedgerError
from privstream.pipeline import BatchResult
from privstream.worker.ledger_columns import Columns

from tests.support.configs import consumer_record


def batch(n: int) -> tuple[list[ConsumerRecord[Any, Any]], np.ndarray[Any, Any]]:
    """``n`` records of two partitions, each with its own key and timestamp."""
    partitions = np.array([0] * (n // 2) + [1] * (n - n // 2), dtype=np.int64)
    records = [
        dataclasses.replace(
            consumer_record(i, b"{}", b"k%d" % i, partition=int(partitions[i])),
            timestamp=1_000 + 7 * i,
        )
        for i in range(n)
    ]
    return records, partitions


@pytest.mark.parametrize(
    "index",
    [
        [0, 1, 2, 3, 4, 5],  # every record released, in order: the shortcut
        [0, 2, 5],
        [3, 0, 1, 2, 5, 4],  # as many outputs as records, reordered
        [0, 0, 2, 3, 4, 5],  # as many outputs as records, one record twice
        [0, 1, 1, 2, 3, 4, 5],
        [],
    ],
)
def test_each_column_is_its_outputs_record_in_input_order(index: list[int]) -> None:
    records, partitions = batch(6)
    subjects = [b"s%d" % i for i in index]  # output j's subject names its record
    result = BatchResult(outputs=[b"o"] * len(index), output_index=index, subjects=subjects)
    columns = Columns(records, result, partitions, "device_id")
    expected = sorted(range(len(index)), key=lambda j: index[j])  # outputs by record, stable
    assert columns.order.tolist() == expected
    picked = [records[index[j]] for j in expected]
    rows = np.arange(len(index), dtype=np.intp)
    got = columns.rows(rows)
    assert columns.partitions.tolist() == [r.partition for r in picked]
    assert got["keys"] == [r.key for r in picked]
    assert got["timestamps_ms"].tolist() == [r.timestamp for r in picked]
    assert got["subjects"] == [b"s%d" % r.offset for r in picked]


@pytest.mark.parametrize("index", [[-1, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 6], [-6, 1]])
def test_an_output_index_outside_the_batch_is_refused(index: list[int]) -> None:
    """A negative index would wrap: with every record 'released in order' the columns
    would pair one record's key and timestamp with another's partition."""
    records, partitions = batch(6)
    subjects: list[bytes | None] = [b"s"] * len(index)
    result = BatchResult(outputs=[b"o"] * len(index), output_index=index, subjects=subjects)
    with pytest.raises(LedgerError, match="output index"):
        Columns(records, result, partitions, "device_id")

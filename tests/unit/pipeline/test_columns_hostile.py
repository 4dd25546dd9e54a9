"""``_columns`` called by hostile Python code: what it reads cannot change under it.

The fast path only passes orjson's dicts, str keys and bytes, whose hashing,
comparison and allocation run no Python code; a Python caller can pass objects
whose ``__hash__`` or ``__eq__`` does, and a collection started by an allocation
runs finalisers (``__del__``). Before the fix, a value's ``__hash__`` that emptied
``records`` made ``fill`` read a freed list (a NULL dereference: the process
died), and a finaliser that grew a part after ``assemble`` had sized the records
made it copy past the end of one (a heap overflow, found under ASan). Each test
here crashes or reports under ``make csan`` on that code; now ``fill`` raises
RuntimeError and ``assemble`` builds what the parts hold when it reads them.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from privstream.pipeline import _columns


class ClearsOnHash:
    """A value (or key) whose hash, once armed, empties a list: the records being read."""

    def __init__(self, records: list[object]) -> None:
        self.records, self.armed = records, False

    def __hash__(self) -> int:
        if self.armed:
            self.records.clear()
        return 7

    def __eq__(self, other: object) -> bool:
        return other is self


class ClearsOnEq:
    """Equal to everything, after emptying a dict: the record being read."""

    def __init__(self, record: dict[str, object]) -> None:
        self.record = record

    def __hash__(self) -> int:
        return hash("k")

    def __eq__(self, other: object) -> bool:
        self.record.clear()
        return True


def test_fill_raises_when_a_values_hash_empties_the_records() -> None:
    records: list[object] = []
    hostile = ClearsOnHash(records)
    # the table holds the value too, so the lookup finds it and the loop goes on to
    # record 1 of a list that is now empty
    records.extend({"f": hostile} for _ in range(64))
    out, table = np.zeros(64, dtype=np.int64), {hostile: 5}
    hostile.armed = True
    with pytest.raises(RuntimeError, match="records changed size from 64 to 0"):
        _columns.fill(records, "f", _columns.POSITION, out, table)
    assert records == []


def test_fill_raises_when_the_keys_hash_empties_the_records() -> None:
    records: list[object] = []
    key = ClearsOnHash(records)
    records.extend({key: 1.5} for _ in range(8))
    key.armed = True
    out = np.zeros(8, dtype=np.float64)
    with pytest.raises(RuntimeError, match="records changed size from 8 to 0"):
        _columns.fill(records, key, _columns.FLOAT, out, None)


def test_fill_reads_a_value_its_record_dropped_during_the_lookup() -> None:
    # the table lookup compares the value with a key of the same hash; the comparison
    # empties the record, which held the only other reference to the value
    record: dict[str, object] = {}
    record["f"] = ClearsOnEq(record)
    out = np.zeros(1, dtype=np.int64)
    assert _columns.fill([record], "f", _columns.POSITION, out, {"k": 3}) is True
    assert out.tolist() == [3]
    assert record == {}


class Grows:
    """A finaliser (on cyclic garbage, so only a collection runs it) that makes the
    first text of a list part longer, counting the runs inside ``armed``."""

    def __init__(self, texts: list[bytes], armed: list[bool], inside: list[int]) -> None:
        self.me = self
        self.texts, self.armed, self.inside = texts, armed, inside

    def __del__(self) -> None:
        self.inside[0] += self.armed[0]
        self.texts[0] = self.texts[0] + b"x" * 4096


@contextmanager
def collecting_at_every_allocation() -> Iterator[None]:
    """A collection at (nearly) every allocation of a tracked object, for the block."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.set_threshold(1)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.collect()


class Pad:
    """One allocation of a tracked object, nothing more."""


#: CPython 3.12 and later start a collection only between bytecodes, never inside an
#: allocation: there no finaliser can run inside these calls at all
COLLECTS_IN_ALLOCATION = sys.version_info < (3, 12)


def finalised_inside(call: Callable[[], object], texts: list[bytes]) -> object:
    """``call()``'s result, from a call during which a collection ran ``Grows``'s
    finaliser (3.11; on later versions, a plain call: none can run inside). The
    interpreter keeps freed lists for reuse (taking one is no allocation, so no
    collection), hence the lists held first; and the allocation that starts a
    collection depends on its counts, hence 0-3 allocations tried between the garbage
    and the call."""
    armed, inside = [False], [0]
    held: list[object] = []
    if not COLLECTS_IN_ALLOCATION:
        return call()
    with collecting_at_every_allocation():
        for pad in range(4):
            gc.collect()
            held.extend([] for _ in range(200))
            Grows(texts, armed, inside)  # cyclic garbage: freed only by a collection
            for _ in range(pad):  # one allocation each, no generator's
                held.append(Pad())  # noqa: PERF401
            armed[0] = True
            result = call()
            armed[0] = False
            if inside[0]:
                return result
    raise AssertionError("no collection ran inside the call: the test cannot show anything")


def test_assemble_copies_what_the_parts_hold_after_its_allocation() -> None:
    texts = [bytes([97 + i]) * 3 for i in range(4)]
    parts: list[object] = [b"{", texts, b"}"]
    args = (parts, 4)
    result = finalised_inside(lambda: _columns.assemble(*args), texts)
    # the finaliser grew record 0's text during the call
    assert len(texts[0]) > 4096 or not COLLECTS_IN_ALLOCATION
    assert result == [b"{" + text + b"}" for text in texts]


def test_utf8_stops_at_the_first_invalid_message_a_collection_may_empty() -> None:
    # the decoder's UnicodeDecodeError is a tracked object: creating it can start a
    # collection, whose finaliser here replaces the message list's first text
    messages = [b"\xff" * 8, "é".encode(), b"a"]
    assert finalised_inside(lambda: _columns.utf8(messages), messages) is False

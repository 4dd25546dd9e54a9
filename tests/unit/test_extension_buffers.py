"""The buffer checks the five C extensions share (``service/privstream/_buffer_checks.h``)
and their refusals of hostile callers outside ``_columns`` (tests/unit/pipeline/
test_columns_hostile.py): a buffer of the same byte length but another item type, size
or signedness is refused before a write, an unaligned one too, and Python code run by
an argument's conversion cannot change a buffer the extension then reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from aiokafka.partitioner import murmur2
from privstream.ledger import _slots
from privstream.mechanisms import _thresholds
from privstream.pipeline import _columns
from privstream.worker import _murmur2

_GUIDE = np.zeros(65_536, dtype=np.uint16)
_PADDED = np.full(1, 2**64 - 1, dtype=np.uint64)  # no threshold, one sentinel


def unaligned(dtype: type[np.generic], n: int) -> np.ndarray:
    """A writable C-contiguous array of n zero items starting one byte past an item."""
    itemsize = np.dtype(dtype).itemsize
    return np.frombuffer(bytearray(itemsize * n + 1), dtype=dtype, count=n, offset=1)


def count(words: Any, padded: Any = _PADDED, guide: Any = _GUIDE, out: Any = None) -> Any:
    out = np.zeros(len(words), dtype=np.int64) if out is None else out
    return _thresholds.count(words, padded, guide, 1, 0, out)


@pytest.mark.parametrize(
    ("code", "accepted"),
    [("Q", True), ("q", False), ("d", False), ("I", False)],  # uint64 words only
)
def test_thresholds_words_must_be_native_uint64(code: str, accepted: bool) -> None:
    words = memoryview(bytearray(16)).cast(code)
    if accepted:
        assert count(words) is None
    else:
        with pytest.raises(ValueError, match="words must hold native uint64 integers"):
            count(words)


@pytest.mark.parametrize(
    ("code", "accepted"), [("I", True), ("i", False), ("f", False), ("H", False)]
)
def test_murmur2_out_must_be_native_uint32(code: str, accepted: bool) -> None:
    size = 4 if code != "H" else 2
    out = memoryview(bytearray(2 * size)).cast(code)
    if accepted:
        _murmur2.murmur2([b"a", b"b"], out)
        assert list(out) == [murmur2(b"a") & 0xFFFFFFFF, murmur2(b"b") & 0xFFFFFFFF]
    else:
        with pytest.raises(ValueError, match="aligned native uint32s"):
            _murmur2.murmur2([b"a", b"b"], out)


@pytest.mark.parametrize(
    ("kind", "code", "accepted"),
    [
        (_columns.INT64, "q", True),
        (_columns.INT64, "Q", False),  # unsigned: the bits of -1 would read as 2^64 - 1
        (_columns.INT64, "d", False),
        (_columns.FLOAT, "d", True),
        (_columns.FLOAT, "q", False),
    ],
)
def test_fill_out_must_be_its_kinds_native_8_bytes(kind: int, code: str, accepted: bool) -> None:
    out = memoryview(bytearray(8)).cast(code)
    if accepted:
        assert _columns.fill([{"v": -1}], "v", kind, out, None) is True
        assert out[0] == -1
    else:
        with pytest.raises(ValueError, match="fill: out must be 1 native"):
            _columns.fill([{"v": -1}], "v", kind, out, None)


@pytest.mark.parametrize("name", ["words", "padded", "guide", "out"])
def test_thresholds_refuse_an_unaligned_array(name: str) -> None:
    """An unaligned uint64 load is undefined behaviour in C (UBSan reports it): refused,
    nothing written."""
    arrays: dict[str, Any] = {
        "words": np.zeros(3, dtype=np.uint64),
        "padded": _PADDED.copy(),
        "guide": _GUIDE.copy(),
        "out": np.full(3, 7, dtype=np.int64),
    }
    moved = unaligned(arrays[name].dtype.type, arrays[name].size)
    moved[:] = arrays[name]
    arrays[name] = moved
    with pytest.raises(ValueError, match=f"count: {name} must be aligned"):
        count(**arrays)
    assert arrays["out"].tolist() == [7, 7, 7]


def test_murmur2_refuses_an_unaligned_out() -> None:
    out = unaligned(np.uint32, 2)
    with pytest.raises(ValueError, match="aligned native uint32s"):
        _murmur2.murmur2([b"a", b"b"], out)


class GrowsOnIndex:
    """A size whose conversion (``__index__``) tries to grow a buffer already exported."""

    def __init__(self, grown: bytearray) -> None:
        self.grown = grown

    def __index__(self) -> int:
        self.grown.extend(bytes(1 << 16))
        return 0


def test_slots_buffers_are_held_before_an_arguments_code_runs() -> None:
    """The size's ``__index__`` runs after the table is exported: growing it (which would
    move its memory) is refused by the export, so the lengths find checks stay true."""
    table = bytearray(np.full((4, 2), -1, dtype=np.int64).tobytes())
    keys = np.array([5], dtype=np.int64)
    slots, firsts = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    with pytest.raises(BufferError):
        _slots.find(table, keys, slots, firsts, GrowsOnIndex(table), True, 1)
    assert len(table) == 64 and set(np.frombuffer(table, dtype=np.int64)) == {-1}
    assert _slots.find(table, keys, slots, firsts, 0, True, 1) == 1  # released after

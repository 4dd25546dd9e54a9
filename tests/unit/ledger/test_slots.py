"""The C hash table ``_slots.find`` called directly: slots, probing at the edges, and its
refusals. A bad call must raise, never write outside its arrays or loop forever.

``mix = 1`` makes a key's home row its top bits, so the tests can choose home rows: small
keys all start at row 0, negative ones at the last row.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable

import numpy as np
import pytest
from privstream.ledger import _slots

I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def table(rows: int) -> np.ndarray:
    return np.full((rows, 2), -1, dtype=np.int64)


def call(
    t: np.ndarray, keys: list[int], size: int = 0, insert: bool = True, mix: int = 1
) -> tuple[int, list[int], list[int]]:
    """(new size, each key's slot, the positions of the keys inserted)."""
    k = np.array(keys, dtype=np.int64)
    slots, firsts = np.empty(len(k), np.int64), np.empty(len(k), np.int64)
    held = _slots.find(t, k, slots, firsts, size, insert, mix)
    return held, slots.tolist(), firsts[: held - size].tolist()


def test_find_assigns_slots_in_first_seen_order_and_reports_the_new() -> None:
    t = table(8)
    assert call(t, [5, 13, 5, 7], mix=0x9E3779B97F4A7C15) == (3, [0, 1, 0, 2], [0, 1, 3])
    assert call(t, [7, 5, 13, 5], size=3, insert=False, mix=0x9E3779B97F4A7C15)[:2] == (
        3,
        [2, 0, 1, 0],
    )
    assert call(t, [99, 5], size=3, insert=False, mix=0x9E3779B97F4A7C15)[1] == [-1, 0]


@pytest.mark.parametrize("rows", [2, 4, 16, 1024])
def test_keys_of_one_home_row_fill_half_the_table_and_wrap_past_its_end(rows: int) -> None:
    # negative keys: home row rows - 1 (top bits all ones); their probes wrap to row 0
    keys = [-2 - i for i in range(rows // 2)]
    t = table(rows)
    assert call(t, keys) == (rows // 2, list(range(rows // 2)), list(range(rows // 2)))
    assert (t[:, 0] != -1).sum() == rows // 2
    absent = -2 - rows // 2  # of the same home row: its probe walks the whole run
    held, slots, _ = call(t, [*keys[::-1], absent], size=rows // 2, insert=False)
    assert (held, slots) == (rows // 2, [*range(rows // 2 - 1, -1, -1), -1])


def test_the_extreme_keys_and_repeats_in_one_call() -> None:
    t = table(16)
    keys = [I64_MIN, I64_MAX, -2, 0, I64_MIN, -2, I64_MAX]
    assert call(t, keys, mix=3) == (4, [0, 1, 2, 3, 0, 2, 1], [0, 1, 2, 3])
    assert call(t, [I64_MAX, -2, 5, I64_MIN, 0], size=4, insert=False, mix=3)[1] == [
        1,
        2,
        -1,
        0,
        3,
    ]


def test_a_lookup_in_an_empty_table_finds_nothing_and_writes_nothing() -> None:
    t = table(2)
    assert call(t, [1, -2, I64_MIN, I64_MAX], insert=False) == (0, [-1] * 4, [])
    assert (t == -1).all()
    assert call(t, []) == (0, [], [])


@pytest.mark.parametrize(
    ("rows", "keys", "size", "insert", "mix", "message"),
    [
        (8, [1, 2, 3, 4, 5], 0, True, 1, "could exceed half"),  # 5 new keys in 8 rows
        (8, [1], 4, True, 1, "could exceed half"),
        (8, [1], 5, False, 1, "could exceed half"),  # a size no table of 8 holds
        (8, [1], -1, False, 1, "could exceed half"),
        (6, [1], 0, True, 1, "power of two"),
        (1, [1], 0, True, 1, "power of two"),
        (8, [3, -1], 0, True, 1, "a key of -1"),
        (8, [3], 0, True, 2, "mix 2 is even"),
    ],
)
def test_find_refuses_what_could_corrupt_the_table(
    rows: int, keys: list[int], size: int, insert: bool, mix: int, message: str
) -> None:
    t = table(rows)
    with pytest.raises(ValueError, match=message):
        call(t, keys, size, insert, mix)
    assert (t == -1).all(), "a refused call wrote to the table"


def test_find_refuses_arrays_of_other_lengths_and_non_contiguous_ones() -> None:
    k = np.array([1, 2], dtype=np.int64)
    e = np.empty(2, np.int64)
    with pytest.raises(ValueError, match="one length"):
        _slots.find(table(8), k, np.empty(1, np.int64), e, 0, True, 1)
    with pytest.raises(ValueError, match="int64 rows"):
        _slots.find(np.full(15, -1, np.int8), k, e, e.copy(), 0, True, 1)
    with pytest.raises(TypeError, match="read-write"):  # a strided view: not contiguous
        _slots.find(table(16)[::2], k, e, e.copy(), 0, True, 1)
    with pytest.raises(TypeError, match="read-write"):
        _slots.find(bytes(128), k, e, e.copy(), 0, True, 1)
    with pytest.raises(ValueError, match="not C-contiguous"):
        _slots.find(table(8), np.arange(4, dtype=np.int64)[::2], e, e.copy(), 0, True, 1)
    locked = table(8)
    locked.flags.writeable = False
    with pytest.raises(TypeError, match="read-write"):
        _slots.find(locked, k, e, e.copy(), 0, True, 1)


def test_find_refuses_unaligned_arrays() -> None:
    """An int64 load from an address not a multiple of 8 is undefined behaviour in C
    (UBSan reports it); numpy makes such arrays from a byte offset."""
    raw = np.zeros(8 * 16 + 8, dtype=np.uint8)
    keys = raw[1:17].view(np.int64)
    keys[:] = [3, 4]
    assert not keys.flags.aligned
    t, e = table(8), np.empty(2, np.int64)
    with pytest.raises(ValueError, match="8-byte aligned"):
        _slots.find(t, keys, e, e.copy(), 0, True, 1)
    unaligned_table = raw[1 : 1 + 16 * 4].view(np.int64)
    with pytest.raises(ValueError, match="8-byte aligned"):
        _slots.find(unaligned_table, np.array([3, 4]), e, e.copy(), 0, True, 1)
    assert (t == -1).all()


def test_a_table_with_no_free_row_raises_instead_of_looping_forever() -> None:
    """No valid call leaves a table without a free row, but an invalid one can (a table
    not filled with -1, or ``size`` understated): the probe must stop, not spin with the
    GIL held. Run in a child process so that a regression fails by timeout, not a hang."""
    script = textwrap.dedent(
        """
        import numpy as np
        from privstream.ledger import _slots
        e = lambda n: np.empty(n, np.int64)
        zeros = np.zeros((8, 2), np.int64)  # every row holds key 0: no free row
        for insert in (False, True):
            try:
                _slots.find(zeros, np.array([5], np.int64), e(1), e(1), 0, insert, 1)
            except ValueError as error:
                assert "no free row" in str(error), error
            else:
                raise AssertionError("a lookup in a full table returned")
        t = np.full((8, 2), -1, np.int64)
        _slots.find(t, np.array([1, 2, 3, 4], np.int64), e(4), e(4), 0, True, 1)
        _slots.find(t, np.array([5, 6, 7, 8], np.int64), e(4), e(4), 0, True, 1)  # size lies
        assert (t[:, 0] != -1).all()
        try:
            _slots.find(t, np.array([9], np.int64), e(1), e(1), 0, False, 1)
        except ValueError as error:
            assert "no free row" in str(error), error
        else:
            raise AssertionError("a lookup in a full table returned")
        print("raised")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "raised", done.stderr


Buffers = tuple[bytearray, bytearray, bytearray, bytearray]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (lambda t, k, s, f: (t, k, s, f, 0, True, 1), None),
        (lambda t, k, s, f: (t, k, s, bytearray(8), 0, True, 1), "one length"),
        (lambda t, k, s, f: (t, k, s, f, 4, True, 1), "could exceed half"),
        (lambda t, k, s, f: (t, k, s, f, 0, True, 2), "even"),
        (lambda t, k, s, f: (t, k, s, bytes(16), 0, True, 1), "read-write"),  # 4th argument
        (
            lambda t, k, s, f: (t, k, s, f, "0", True, 1),
            "cannot be interpreted",
        ),  # after the buffers
        (lambda t, k, s, f: (t, bytearray(b"\xff" * 16), s, f, 0, True, 1), "a key of -1"),
        (lambda t, k, s, f: (bytearray(16 * 8), k, s, f, 0, False, 1), "no free row"),
    ],
)
def test_every_buffer_is_released_on_every_path(
    args: Callable[..., tuple[object, ...]], error: str | None
) -> None:
    """A bytearray cannot grow while a buffer of it is held (BufferError): after a call,
    returning or raising, each must grow."""
    buffers: Buffers = (
        bytearray(table(8).tobytes()),
        bytearray(np.array([1, 2], dtype=np.int64).tobytes()),
        bytearray(16),
        bytearray(16),
    )
    chosen = args(*buffers)
    if error is None:
        assert _slots.find(*chosen) == 2
    else:
        with pytest.raises((ValueError, TypeError), match=error):
            _slots.find(*chosen)
    for buffer in {id(b): b for b in chosen if isinstance(b, bytearray)}.values():
        buffer.extend(bytes(8))

"""The batch murmur2 partitioner (C, ``_murmur2.c``) against aiokafka's (Kafka's Java client's)
one-key version."""

from __future__ import annotations

import random

import numpy as np
import pytest
from aiokafka.partitioner import DefaultPartitioner, murmur2
from hypothesis import given, settings
from hypothesis import strategies as st
from privstream.worker import _murmur2
from privstream.worker.partitioner import murmur2 as batch_murmur2
from privstream.worker.partitioner import partitions_of


def test_every_key_length_hashes_as_the_java_client_does() -> None:
    rng = random.Random(5)  # keys of every length 0..40, every tail length, random bytes
    keys = [rng.randbytes(length) for length in range(41) for _ in range(50)]
    keys += [b"", b"\x00", b"\xff" * 7, "Zürich".encode()]
    assert batch_murmur2(keys).tolist() == [murmur2(key) & 0xFFFFFFFF for key in keys]


def test_partitions_are_the_default_partitioners() -> None:
    rng = random.Random(6)
    keys = [f"device-{rng.randrange(10**9)}".encode() for _ in range(2_000)]
    for count in (1, 3, 4, 12):
        every = list(range(count))
        expected = [DefaultPartitioner()(key, every, every) for key in keys]
        assert partitions_of(keys, count).tolist() == expected


def test_keys_of_one_length_and_no_keys() -> None:
    """The one-length fast path (one join, no reordering) and an empty batch."""
    keys = [f"{i:08x}-4a3b".encode() for i in range(0, 10**6, 977)]
    assert batch_murmur2(keys).tolist() == [murmur2(key) & 0xFFFFFFFF for key in keys]
    assert batch_murmur2([]).tolist() == []


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(st.binary(max_size=13), max_size=60))
def test_keys_of_mixed_lengths_in_any_order_hash_as_the_java_client_does(
    keys: list[bytes],
) -> None:
    """Reordered by length and joined once: each hash must still land on its own key."""
    assert batch_murmur2(keys).tolist() == [murmur2(key) & 0xFFFFFFFF for key in keys]


def test_murmur2_refuses_what_is_not_bytes_and_a_wrong_buffer() -> None:
    out = np.zeros(2, dtype=np.uint32)
    with pytest.raises(TypeError, match="key 1 is str"):
        _murmur2.murmur2([b"a", "b"], out)
    assert out.tolist() == [0, 0], "a refused call wrote"
    with pytest.raises(ValueError, match="2 aligned native uint32s"):
        _murmur2.murmur2([b"a", b"b"], np.zeros(3, dtype=np.uint32))
    with pytest.raises(TypeError):
        _murmur2.murmur2((b"a",), np.zeros(1, dtype=np.uint32))  # a list, not a tuple
    assert batch_murmur2((b"a", b"bc")).tolist() == [murmur2(k) & 0xFFFFFFFF for k in (b"a", b"bc")]


def test_lengths_to_64_all_ones_bytes_and_a_big_batch_hash_as_the_java_client_does() -> None:
    rng = random.Random(8)  # every whole-word count to 16 and every tail, 0xff: sign bits set
    keys = [rng.randbytes(length) for length in range(65)] + [b"\xff" * n for n in range(65)]
    keys += [rng.randbytes(rng.randrange(0, 300)) for _ in range(20_000)]
    assert batch_murmur2(keys).tolist() == [murmur2(key) & 0xFFFFFFFF for key in keys]


class Key(bytes):
    """A bytes subclass: its bytes are the key (aiokafka hashes it as bytes)."""


@pytest.mark.parametrize(
    "bad",
    [bytearray(b"b"), memoryview(b"b"), None, 7, "b"],
    ids=["bytearray", "memoryview", "None", "int", "str"],
)
def test_a_key_that_is_not_bytes_is_refused_before_any_write(bad: object) -> None:
    out = np.full(3, 7, dtype=np.uint32)
    with pytest.raises(TypeError, match="key 1 is"):
        _murmur2.murmur2([b"a", bad, b"c"], out)
    assert out.tolist() == [7, 7, 7], "a refused call wrote"
    assert batch_murmur2([Key(b"abc")]).tolist() == [murmur2(b"abc") & 0xFFFFFFFF]


def test_an_out_buffer_of_another_type_or_layout_is_refused_before_any_write() -> None:
    """A float32, int32, uint16 or uint8 array of the right byte size would take the hash's
    bits and hand back wrong partitions; a misaligned, strided or read-only one is refused
    too, and none is written."""
    keys = [b"a", b"b"]
    raw = np.zeros(9, dtype=np.uint8)
    outs = [
        np.zeros(2, dtype=np.float32),
        np.zeros(2, dtype=np.int32),
        np.zeros(4, dtype=np.uint16),
        np.zeros(8, dtype=np.uint8),
        np.zeros(2, dtype=">u4"),
        np.zeros(1, dtype=np.uint64),
        np.frombuffer(raw.data, dtype=np.uint32, count=2, offset=1),  # misaligned
        np.zeros(4, dtype=np.uint32)[::2],
        bytearray(8),
    ]
    for out in outs:
        before = bytes(out)
        with pytest.raises((ValueError, BufferError)):
            _murmur2.murmur2(keys, out)
        assert bytes(out) == before, f"a refused call wrote into {out!r}"
    frozen = np.zeros(2, dtype=np.uint32)
    frozen.flags.writeable = False
    with pytest.raises((ValueError, TypeError)):
        _murmur2.murmur2(keys, frozen)

"""A seeded fuzz loop over every entry point of the first five C extensions (the sixth,
``aggregates/_bounds.c``: oracles, collisions and hostile callers in
``tests/unit/aggregates/test_bounds.py``).

Each round draws inputs, well formed or not, and checks the answer against a model
in Python: the value the model gives, or the refusal it expects (ValueError or
TypeError), never anything else. Under ``make csan`` (AddressSanitizer and UBSan
builds) a read or write outside an object, or undefined behaviour, fails the run
even where the answer happens to be right. Seeds are fixed: a failure repeats.
``PRIVSTREAM_FUZZ_ROUNDS`` raises the rounds per entry point (300 by default) for a
longer search.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import pytest
from aiokafka.partitioner import murmur2
from aiokafka.record.util import calc_crc32c
from privstream.ledger import _slots
from privstream.mechanisms import _thresholds
from privstream.pipeline import _columns
from privstream.worker import _murmur2, _records
from privstream.worker.output_batch import encoded_headers
from privstream.worker.record_batch import varint

from tests.unit.mechanisms.test_local_hashing import ref_splitmix64
from tests.unit.pipeline.test_columns_redteam import assemble_model

ROUNDS = int(os.environ.get("PRIVSTREAM_FUZZ_ROUNDS", "300"))
I64_MIN, I64_MAX, TOP = -(2**63), 2**63 - 1, 2**64 - 1
#: values of every type a caller may pass, at the kinds' edges
VALUES: list[Any] = [
    0, 1, -1, 2**53 + 1, I64_MAX, I64_MIN, I64_MAX + 1, I64_MIN - 1, 10**400,
    0.0, -0.0, 1.5, 1e308, float("inf"), float("nan"), True, False, None,
    "a", "b", "", b"a", [1], {"a": 1}, (1,),
]  # fmt: skip
TEXTS = [b"", b",", b"1,2", b"x" * 40, b"\xff", "é".encode(), b"\x00"]


class NotADict(Exception):
    """The model's refusal: a record that is not a dict, reached before any False."""


def fill_model(records: list[Any], kind: int, table: Any) -> list[Any] | None:
    """fill's answer in Python: each record's item, or None where it answers False
    (records are read in order, and the first that is not of the kind ends the read)."""
    items: list[Any] = []
    for record in records:
        if type(record) is not dict:
            raise NotADict
        if "v" not in record:
            return None
        value = record["v"]
        if kind == _columns.FLOAT and type(value) in (float, int):
            try:
                items.append(float(value))
            except OverflowError:
                return None
            continue
        if kind == _columns.BOOL:
            value = int(value) if type(value) is bool else None
        elif kind == _columns.POSITION:
            try:
                value = table.get(value)
            except TypeError:
                return None
        elif kind == _columns.FLOAT:
            return None
        if type(value) is not int or not I64_MIN <= value <= I64_MAX:
            return None
        items.append(value)
    return items


@pytest.mark.parametrize("kind", [_columns.FLOAT, _columns.INT64, _columns.BOOL, 3])
def test_fill(kind: int) -> None:
    rng = random.Random(f"fill-{kind}")
    table = {v: rng.choice([0, 1, -5, I64_MAX + 1, "x"]) for v in VALUES if v.__hash__}
    dtype = np.float64 if kind == _columns.FLOAT else np.int64
    for _ in range(ROUNDS):
        records: list[Any] = [
            {"v": rng.choice(VALUES)} if rng.random() > 0.03 else {}
            for _ in range(rng.randint(0, 6))
        ]
        if records and rng.random() < 0.05:
            records[rng.randrange(len(records))] = rng.choice([None, [1], "r"])
        length = len(records) + (rng.choice([-1, 1]) if rng.random() < 0.05 else 0)
        out = np.zeros(max(length, 0), dtype=rng.choice([dtype] * 9 + [np.int32]))
        if out.size != len(records) or out.dtype != dtype:
            with pytest.raises(ValueError, match="fill: out must be"):
                _columns.fill(records, "v", kind, out, table)
            continue
        try:
            expected = fill_model(records, kind, table)
        except NotADict:
            with pytest.raises(TypeError, match="is not a dict"):
                _columns.fill(records, "v", kind, out, table)
            continue
        assert _columns.fill(records, "v", kind, out, table) is (expected is not None)
        if expected is not None:
            np.testing.assert_array_equal(out, np.array(expected, dtype=dtype))


def test_assemble() -> None:
    rng = random.Random("assemble")
    for _ in range(ROUNDS):
        count = rng.randint(0, 5)
        parts: list[Any] = []
        for _ in range(rng.randint(0, 5)):
            form = rng.randrange(5)
            if form == 0:
                parts.append(rng.choice(TEXTS))
            elif form == 1:
                size = count if rng.random() < 0.9 else rng.randint(0, 6)
                parts.append(
                    [rng.choice(TEXTS + ["s"] * (rng.random() < 0.1)) for _ in range(size)]
                )
            elif form == 2:
                size = max(0, count + rng.choice([0, 0, 0, -1, 1]))
                parts.append((b",".join(b"%d" % rng.randint(-9, 99) for _ in range(size)),))
            elif form == 3:
                parts.append((rng.choice(TEXTS),))
            else:
                parts.append(rng.choice([bytearray(b"a"), "a", (b"a", b"b"), (), None]))
        expected = assemble_model(parts, count)
        for joined in (False, True):
            if expected is None:
                with pytest.raises(ValueError, match="assemble"):
                    _columns.assemble(parts, count, joined)
            elif joined:
                assert _columns.assemble(parts, count, True) == b"".join(
                    t + b"\n" for t in expected
                )
            else:
                assert _columns.assemble(parts, count) == expected


def test_only_longest_and_utf8() -> None:
    rng = random.Random("messages")
    pool: list[Any] = [*TEXTS, b"\xc3", b"\xed\xa0\x80", "s", 1, bytearray(b"a"), None]
    for _ in range(ROUNDS):
        messages = [rng.choice(pool) for _ in range(rng.randint(0, 6))]
        every_bytes = all(type(m) is bytes for m in messages)
        kinds = tuple(rng.sample([bytes, str, int, bytearray], rng.randint(0, 3)))
        assert _columns.only(messages, kinds) is all(type(m) in kinds for m in messages)
        assert _columns.longest(messages) == (
            max(map(len, messages), default=0) if every_bytes else -1
        )

        def valid(message: bytes) -> bool:
            try:
                message.decode("utf-8")
            except UnicodeDecodeError:
                return False
            return True

        assert _columns.utf8(messages) is (every_bytes and all(map(valid, messages)))


def test_murmur2() -> None:
    rng = random.Random("murmur2")
    for _ in range(ROUNDS):
        keys: list[Any] = [rng.randbytes(rng.randint(0, 13)) for _ in range(rng.randint(0, 6))]
        if keys and rng.random() < 0.05:
            keys[rng.randrange(len(keys))] = rng.choice(["k", None, bytearray(b"k")])
        size = len(keys) + (rng.choice([-1, 1]) if rng.random() < 0.05 else 0)
        out = np.zeros(max(size, 0), dtype=rng.choice([np.uint32] * 9 + [np.int32]))
        if out.size != len(keys) or out.dtype != np.uint32:
            with pytest.raises(ValueError):
                _murmur2.murmur2(keys, out)
        elif any(not isinstance(k, bytes) for k in keys):
            with pytest.raises(TypeError):
                _murmur2.murmur2(keys, out)
        else:
            _murmur2.murmur2(keys, out)
            assert out.tolist() == [murmur2(k) & 0xFFFFFFFF for k in keys]


def records_model(
    values: list[bytes], tails: list[bytes], start: int, room: int
) -> tuple[int, bytes]:
    """What ``_records.encode`` writes of ``values[start:]`` into ``room`` bytes: how many
    records, their bytes."""
    out, count = b"", 0
    for delta, (value, tail) in enumerate(zip(values[start:], tails[start:], strict=True)):
        body = b"\x00\x00" + varint(delta) + b"\x01" + varint(len(value)) + value + tail
        record = varint(len(body)) + body
        if len(out) + len(record) > room:
            break
        out, count = out + record, count + 1
    return count, out


def test_records() -> None:
    rng = random.Random("records")
    tail = encoded_headers([("h", b"v")])
    for _ in range(ROUNDS):
        n = rng.randint(0, 6)
        values: list[Any] = [rng.randbytes(rng.choice([0, 1, 63, 64, 200])) for _ in range(n)]
        tails: list[Any] = [rng.choice([b"\x00", tail]) for _ in range(n)]
        if n and rng.random() < 0.05:
            rng.choice([values, tails])[rng.randrange(n)] = rng.choice(["s", None, bytearray(1)])
        start, at = rng.randint(0, n + 1), rng.randint(0, 8)
        out = bytearray(rng.randint(0, 700))
        before = bytes(out)
        if start > n or at > len(out):
            with pytest.raises(ValueError):
                _records.encode(values, tails, start, out, at)
        elif any(type(v) is not bytes for v in [*values[start:], *tails[start:]]):
            with pytest.raises(TypeError):
                _records.encode(values, tails, start, out, at)
            assert out == before
        else:
            count, expected = records_model(values, tails, start, len(out) - at)
            assert _records.encode(values, tails, start, out, at) == (count, at + len(expected))
            assert out == before[:at] + expected + before[at + len(expected) :]


def test_crc32c() -> None:
    rng = random.Random("crc32c")
    for _ in range(ROUNDS if _records.HARDWARE_CRC else 0):
        data = rng.randbytes(rng.randint(0, 100))
        start = rng.randint(0, len(data))
        view = memoryview(data)[start:]
        if rng.random() < 0.1 and len(view) % 4 == 0:
            with pytest.raises(ValueError):
                _records.crc32c(view.cast(rng.choice("bI")))
        else:
            assert _records.crc32c(view) == calc_crc32c(view)


def level(rng: random.Random) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """A sorted table clustered into a few guide buckets: (bounds, padded, guide, steps)."""
    buckets = [rng.randrange(1 << 16) for _ in range(rng.randint(1, 4))] + [(1 << 16) - 1]
    bounds = np.sort(
        np.array(
            [
                (rng.choice(buckets) << 48) | rng.randrange(1 << 48)
                for _ in range(rng.randint(0, 40))
            ],
            dtype=np.uint64,
        )
    )
    starts = np.arange(1 << 16, dtype=np.uint64) << np.uint64(48)
    guide = np.searchsorted(bounds, starts, side="left").astype(np.uint16)
    per_bucket = np.bincount((bounds >> np.uint64(48)).astype(np.int64), minlength=1)
    steps = max(int(per_bucket.max(initial=0)), 1)
    padded = np.concatenate([bounds, np.full(steps, TOP, dtype=np.uint64)])
    return bounds, padded, guide, steps


def test_thresholds() -> None:
    rng = random.Random("thresholds")
    for _ in range(ROUNDS):
        bounds, padded, guide, steps = level(rng)
        near = [int(b) + d for b in bounds for d in (-1, 0, 1)]
        words = np.array(
            [min(max(rng.choice([*near, 0, TOP, rng.randrange(TOP)]), 0), TOP) for _ in range(8)],
            dtype=np.uint64,
        )
        out = np.zeros(words.size, dtype=np.int64)
        if rng.random() < 0.1:  # a corrupt guide entry: refused, never a read past padded
            guide[words[0] >> np.uint64(48)] = bounds.size + 1
            with pytest.raises(ValueError, match="corrupt"):
                _thresholds.count(words, padded, guide, steps, bounds.size, out)
        elif rng.random() < 0.1:  # size and steps that do not add up to padded's length
            with pytest.raises(ValueError, match="padded holds"):
                _thresholds.count(words, padded, guide, steps + 1, bounds.size, out)
        else:
            assert _thresholds.count(words, padded, guide, steps, bounds.size, out) is None
            assert out.tolist() == np.searchsorted(bounds, words, side="right").tolist()


def test_support() -> None:
    """OLH's support count: edge seeds, buckets and g (1 to 2^64 - 1) against the
    remainder in Python; a bucket not below g or an out of the wrong length refused
    before a write."""
    rng = random.Random("support")
    for _ in range(ROUNDS):
        g = rng.choice([1, 2, 3, 2**32 + 1, 2**63, TOP, rng.randrange(1, TOP + 1)])
        n, k = rng.randint(0, 6), rng.randint(0, 4)
        seed_words = [rng.choice([0, TOP, rng.randrange(TOP + 1)]) for _ in range(n)]
        bucket_words = [rng.choice([0, g - 1, rng.randrange(g)]) for _ in range(n)]
        seeds = np.array(seed_words, dtype=np.uint64)
        buckets = np.array(bucket_words, dtype=np.uint64)
        digests = np.array([rng.randrange(TOP + 1) for _ in range(k)], dtype=np.uint64)
        out = np.full(k, -1, dtype=np.int64)
        if n and rng.random() < 0.1:
            buckets[rng.randrange(n)] = min(g + rng.randrange(3), TOP)
            with pytest.raises(ValueError, match="is not below g"):
                _thresholds.support(seeds, buckets, digests, g, out)
            assert (out == -1).all()
        elif rng.random() < 0.1:
            with pytest.raises(ValueError, match="as many out items"):
                _thresholds.support(seeds, buckets, digests, g, np.zeros(k + 1, dtype=np.int64))
        else:
            assert _thresholds.support(seeds, buckets, digests, g, out) is None
            pairs = list(zip(seeds.tolist(), buckets.tolist(), strict=True))
            assert out.tolist() == [
                sum(ref_splitmix64(d ^ s) % g == y for s, y in pairs) for d in digests.tolist()
            ]


def test_slots() -> None:
    rng = random.Random("slots")
    for _ in range(ROUNDS // 10):
        capacity = 1 << rng.randint(1, 7)
        table = np.full((capacity, 2), -1, dtype=np.int64)
        mix = rng.randrange(1 << 64) | 1
        held: dict[int, int] = {}
        universe = [
            rng.choice([rng.randint(I64_MIN, I64_MAX), rng.randint(0, 9)]) for _ in range(12)
        ]
        for _ in range(10):
            keys = [k for k in rng.choices(universe, k=rng.randint(0, 4)) if k != -1]
            insert = rng.random() < 0.7
            array = np.array(keys, dtype=np.int64)
            slots, firsts = np.zeros_like(array), np.full_like(array, -7)
            if len(held) > capacity // 2 - (len(keys) if insert else 0):
                with pytest.raises(ValueError, match="grow the table"):
                    _slots.find(table, array, slots, firsts, len(held), insert, mix)
                continue
            new = []
            for i, key in enumerate(keys):
                if key not in held and insert:
                    held[key] = len(held)
                    new.append(i)
            size = _slots.find(table, array, slots, firsts, len(held) - len(new), insert, mix)
            assert size == len(held)
            assert slots.tolist() == [held.get(k, -1) for k in keys]
            assert firsts[: len(new)].tolist() == new


#: values each kind takes (a POSITION's table maps every hashable value)
OF_KIND: dict[int, list[Any]] = {
    _columns.FLOAT: [1.5, -0.0, 7],
    _columns.INT64: [0, -1, I64_MAX],
    _columns.BOOL: [True, False],
    _columns.POSITION: ["a", 0, None],
}


class Meddler:
    """A value or key whose hashing and comparison change what fill is reading: the
    list of records, a record, or the table, as its seeded generator says (while armed)."""

    armed = False

    def __init__(self, rng: random.Random, records: list[Any], table: dict[Any, Any]) -> None:
        self.rng, self.records, self.table = rng, records, table

    def meddle(self) -> None:
        if not Meddler.armed:
            return
        action = self.rng.randrange(6)
        if action == 0 and self.records:
            self.records.pop()
        elif action == 1:
            self.records.append({"v": 1})
        elif action == 2 and self.records:
            self.records[self.rng.randrange(len(self.records))] = {"v": 2.5}
        elif action == 3 and self.records:
            self.records[0].clear()
        elif action == 4:
            self.table.clear()
        else:
            self.records.clear()

    def __hash__(self) -> int:
        self.meddle()
        return self.rng.choice([0, 1, hash("v"), hash("v")])  # mostly the key's: compared

    def __eq__(self, other: object) -> bool:
        self.meddle()
        return self.rng.random() < 0.8


@pytest.mark.parametrize("kind", [_columns.FLOAT, _columns.INT64, _columns.BOOL, 3])
def test_fill_with_meddling_values_and_keys(kind: int) -> None:
    """Values and keys that change the records, a record or the table while fill reads
    them: an answer (True or False) or RuntimeError (the list changed size), nothing
    else; under make csan, no read or write outside an object either (the code before
    the fix failed here under UBSan: a read through a freed record). The rounds are
    seeded; only the interpreter's str hashing varies between runs, and each outcome
    is seen at least 5 times per kind in 300 rounds (PYTHONHASHSEED 0-5)."""
    rng = random.Random(f"meddle-{kind}")
    dtype = np.float64 if kind == _columns.FLOAT else np.int64
    outcomes = set()
    for _ in range(ROUNDS):
        records: list[Any] = []
        table: dict[Any, Any] = {}
        size = rng.randint(1, 6)
        for _ in range(size):  # values mostly of the kind, so that the read goes on
            pool = VALUES if rng.random() < 0.3 else OF_KIND[kind]
            value = Meddler(rng, records, table) if rng.random() < 0.3 else rng.choice(pool)
            records.append({"v": value})
        table.update({v: 1 for r in records for v in r.values() if type(v) is Meddler})
        table["v"] = 3
        key: Any = Meddler(rng, records, table) if rng.random() < 0.3 else "v"
        out = np.zeros(size, dtype=dtype)
        Meddler.armed = True
        try:
            answer = _columns.fill(records, key, kind, out, table)
        except RuntimeError as error:
            assert "records changed size" in str(error)
            outcomes.add("changed")
        else:
            assert answer in (True, False)
            outcomes.add(answer)
        finally:
            Meddler.armed = False
    assert outcomes == {True, False, "changed"}

"""The fast batch path (orjson, column-wise checks and encoding) against the reference.

``process_batch`` must give the very bytes, output positions, dead-letter
reasons and details, and observations of ``process_batch_reference`` (stdlib
JSON, one record at a time) for the same noise: on the integration fuzz
corpus (every malformed kind), on hand-picked edge cases where orjson and the
stdlib read JSON differently, and on random byte mutations of good records.
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest
from privstream.config import parse_config
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import build_plan
from privstream.pipeline.batch import process_batch
from privstream.pipeline.noise import Replayable
from privstream.pipeline.plan import RecordPlan
from privstream.pipeline.reference import process_batch_reference
from privstream.pipeline.results import BatchResult

from tests.integration.fuzz_messages import PRIVACY, fuzz_cases, good_cases, interleave
from tests.unit._support import config_dict

SECRET = bytes(range(7, 39))

#: integer-domain categorical with unknown_as, a memoized field, a public and a real one
MIXED: list[dict[str, Any]] = [
    {"name": "id", "kind": "drop"},
    {"name": "pub", "kind": "public"},
    {"name": "x", "kind": "real", "bounds": [-5, 5], "epsilon": 1.0},
    {"name": "n", "kind": "integer", "bounds": [0, 10], "epsilon": 1.0},
    {"name": "lvl", "kind": "categorical", "domain": [1, 2, 3], "unknown_as": 3, "epsilon": 1.0},
    {"name": "s", "kind": "categorical", "domain": ["a", "b"], "epsilon": 1.0},
    {
        "name": "m",
        "kind": "categorical",
        "domain": ["u", "v", "w"],
        "epsilon": 1.0,
        "memoize_by": "id",
        "memo_identity_trusted": True,
    },
    {"name": "b", "kind": "boolean", "epsilon": 1.0},
]


def plan_of(fields: list[dict[str, Any]]) -> RecordPlan:
    return build_plan(parse_config(config_dict(fields, epsilon=20.0, delta=1e-5)))


def noise(messages: list[bytes]) -> Replayable:
    count = len(messages)
    partitions = np.arange(count, dtype=np.int64) % 3
    offsets = np.arange(count, dtype=np.int64) * 7 + 11
    return Replayable(NoiseKeys(SECRET, "raw"), partitions, offsets, messages)


def assert_same(plan: RecordPlan, messages: list[bytes]) -> BatchResult:
    fast = process_batch(plan, messages, noise(messages))
    reference = process_batch_reference(plan, messages, noise(messages))
    assert fast.output_index == reference.output_index
    assert fast.dead_letters == reference.dead_letters
    assert fast.outputs == reference.outputs
    assert fast.observations.keys() == reference.observations.keys()
    for name, seen in reference.observations.items():
        assert fast.observations[name].clamped == seen.clamped
    return fast


def test_fuzz_corpus_gives_identical_bytes_and_reasons() -> None:
    cases = interleave(good_cases(2_000), fuzz_cases(3_000))
    result = assert_same(build_plan(parse_config(config_dict(**_privacy()))), _values(cases))
    assert result.outputs and result.dead_letters


def _privacy() -> dict[str, Any]:
    body: dict[str, Any] = json.loads(json.dumps(PRIVACY))
    return {
        "fields": body["fields"],
        "epsilon": body["privacy"]["epsilon"],
        "delta": body["privacy"]["delta"],
    }


def _values(cases: list[Any]) -> list[bytes]:
    return [c.value or b"" for c in cases]


def good_mixed(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "id": rng.choice(["d1", "d2", 7]),
        "pub": rng.choice([i, "é", None, True, 1.5, [1, {"a": 2}]]),
        "x": rng.uniform(-8, 8),
        "n": rng.randint(-3, 14),
        "lvl": rng.choice([1, 2, 3, 9]),
        "s": rng.choice(["a", "b"]),
        "m": rng.choice(["u", "v", "w"]),
        "b": rng.random() < 0.5,
    }


BIG = str(10**30)
HUGE = str(10**400)
#: (field, raw JSON text): values orjson and the stdlib read differently, or nearly so
EDGES = [
    *[(f, v) for f in ("pub", "x", "n", "lvl", "s", "m", "b", "id") for v in (BIG, "-" + BIG)],
    *[(f, HUGE) for f in ("pub", "x", "n", "lvl", "id")],
    *[(f, "18446744073709551615") for f in ("pub", "x", "n", "lvl", "id")],
    *[(f, "-9223372036854775809") for f in ("pub", "x", "n", "lvl", "id")],
    *[(f, "9007199254740993") for f in ("pub", "x", "n", "lvl")],
    *[(f, v) for f in ("pub", "x", "n") for v in ("-0", "-0.0", "1e-400", "1e308", "3.0")],
    *[(f, v) for f in ("pub", "x", "n", "lvl") for v in ("1e999", "-1e999", "NaN", "Infinity")],
    *[(f, "1e19") for f in ("pub", "x", "n", "lvl")],
    ("pub", '"\\ud800"'),
    ("pub", '"\\udc00x"'),
    ("s", '"\\ud800"'),
    ("pub", '"\\u00e9\\n\\"%s%%"'),
    ("pub", '"\u00e9\u6771\U0001f642"'),
    ("pub", "[1, " + BIG + "]"),
    ("pub", '{"a": 1, "b": 2, "a": 3}'),
    ("pub", '{"a": [' + BIG + "]}"),
    ("pub", "[" * 150 + "]" * 150),
    ("pub", "[" * 199 + "]" * 199),
    ("pub", "[" * 900 + "]" * 900),
    ("pub", "[" * 5000 + "]" * 5000),
    ("id", "[" * 5000 + "]" * 5000),
    ("lvl", "true"),
    ("lvl", "1.0"),
    ("lvl", '"1"'),
    ("n", "true"),
    ("n", "2.5"),
    ("b", "1"),
    ("b", "null"),
    ("m", '"zz"'),
    ("id", "null"),
    ("id", "1.5"),
    ("id", "true"),
]


def edge_messages() -> list[bytes]:
    rng = random.Random(5)
    out: list[bytes] = []
    for i, (name, text) in enumerate(EDGES):
        record = good_mixed(rng, i)
        pairs = [(k, json.dumps(v)) for k, v in record.items()]
        pairs = [(k, text if k == name else v) for k, v in pairs]
        out.append(("{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in pairs) + "}").encode())
        out.append(json.dumps(record).encode())
    out += [b'{"pub":1}', b"[]", b"", b"\xef\xbb\xbf{}", b"\xff", b'{"a":1}\x00', b"null"]
    out.append(json.dumps({**good_mixed(rng, 0), "x": 1, "x ": 2}).encode())
    out.append(b'{"x":1,' + json.dumps(good_mixed(rng, 1)).encode()[1:])  # duplicate x
    return out


@pytest.mark.parametrize("fields", [MIXED, MIXED[:-1]], ids=["mixed", "no_boolean"])
def test_edge_cases_give_identical_bytes_and_reasons(fields: list[dict[str, Any]]) -> None:
    assert_same(plan_of(fields), edge_messages())


def test_random_mutations_give_identical_bytes_and_reasons() -> None:
    rng = random.Random(99)
    messages: list[bytes] = []
    for i in range(3_000):
        raw = bytearray(json.dumps(good_mixed(rng, i), ensure_ascii=rng.random() < 0.5).encode())
        for _ in range(rng.randint(0, 3)):
            at = rng.randrange(len(raw))
            action = rng.randrange(3)
            if action == 0:
                raw[at] = rng.randrange(256)
            elif action == 1:
                del raw[at]
            else:
                raw.insert(at, rng.choice(b'{}[]",:0123456789.eE-+ \\untrfals\xc3\xa9\xed'))
        messages.append(bytes(raw))
    result = assert_same(plan_of(MIXED), messages)
    assert result.outputs and result.dead_letters


def test_all_good_and_all_bad_batches() -> None:
    rng = random.Random(3)
    plan = plan_of(MIXED)
    assert_same(plan, [json.dumps(good_mixed(rng, i)).encode() for i in range(500)])
    assert_same(plan, [b"{"] * 10)
    assert_same(plan, [])
    assert_same(plan_of([{"name": "pub", "kind": "public"}]), [b'{"pub":1}', b"[]", b"{}"])


def test_number_texts_match_json_dumps() -> None:
    """orjson writes the numbers of a column where repr's notation and digits agree."""
    from privstream.pipeline.encode import column_texts

    rng = np.random.default_rng(4)
    floats = rng.integers(0, 2**64, 200_000, dtype=np.uint64, endpoint=False).view(np.float64)
    edges = [0.0, -0.0, 1e-4, -1e-4, 9.999e-5, 1e16, 1e15, 1e22, 5e-324, 1.7976931348623157e308]
    edges += [float(b + k * np.spacing(b)) for b in (1e-4, 1e16, 2.0**53) for k in range(-3, 4)]
    for chunk in (floats[:100_000].tolist(), floats[np.isfinite(floats)].tolist(), edges):
        assert column_texts(chunk) == [json.dumps(v).encode() for v in chunk]
    ints = [*rng.integers(-(2**63), 2**63 - 1, 10_000).tolist(), 0, -1, 2**64 - 1, 2**70]
    assert column_texts(ints) == [json.dumps(v).encode() for v in ints]
    assert column_texts([1.5, float("inf"), float("nan")]) == [b"1.5", b"Infinity", b"NaN"]

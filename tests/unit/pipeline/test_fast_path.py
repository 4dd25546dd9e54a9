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
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline.batch import process_batch
from privstream.pipeline.noise import Replayable
from privstream.pipeline.plan import RecordPlan
from privstream.pipeline.reference import process_batch_reference
from privstream.pipeline.results import BatchResult

from tests.support.configs import config_dict
from tests.support.fuzz_messages import PRIVACY, fuzz_cases, good_cases, interleave

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


#: structured kinds: a vector whose released values fall below 1e-4 (json.dumps writes
#: those rows), a functional, two sets (one dropping and truncating), local hashing
STRUCTURED: list[dict[str, Any]] = [
    {"name": "id", "kind": "drop"},
    {"name": "v", "kind": "vector", "dimension": 4, "l2_bound": 2.0, "epsilon": 1.0, "delta": 1e-6},
    {
        "name": "w",
        "kind": "vector",
        "dimension": 3,
        "l2_bound": 1e-3,
        "epsilon": 4.0,
        "delta": 1e-6,
    },
    {
        "name": "f",
        "kind": "functional",
        "grid": [0.0, 0.25, 0.5, 0.75, 1.0],
        "bandwidth": 0.3,
        "rkhs_radius": 1.0,
        "epsilon": 1.0,
        "delta": 1e-6,
    },
    {"name": "s", "kind": "set", "universe": ["a", "é", 'q"', "d"], "max_items": 2, "epsilon": 1.0},
    {
        "name": "t",
        "kind": "set",
        "universe": ["a", "b", "c"],
        "max_items": 1,
        "on_unknown": "drop",
        "on_too_many": "truncate",
        "epsilon": 1.0,
    },
    {"name": "h", "kind": "categorical", "mechanism": "local_hashing", "epsilon": 1.0},
]

#: (field, raw JSON text) the structured parsers must read exactly as ``handler.parse``
STRUCTURED_EDGES = [
    *[("v", v) for v in ("[1, 2, 3]", "[1, 2, 3, 4, 5]", "[]", '"1,2,3,4"', "{}", "null")],
    *[("v", v) for v in ("[true, 0, 0, 0]", '[1, 2, 3, "4"]', "[1, 2, 3, null]", "[[1], 2, 3, 4]")],
    *[("v", v) for v in ("[1e999, 0, 0, 0]", "[NaN, 0, 0, 0]", "[-Infinity, 0, 0, 0]")],
    ("v", f"[{BIG}, -{BIG}, {HUGE}, 0]"),
    ("v", f"[{BIG}, -{BIG}, 18446744073709551615, -9223372036854775809]"),
    ("v", "[1e308, -1e308, 5e-324, -0.0]"),
    ("w", "[0, 0, 0]"),
    ("w", "[1, 2, 3.5]"),
    *[("f", v) for v in ("[0, 1, 2, 3]", "[0, 1, 2, 3, false]", "[0.5, 1, 2, 3, 1e300]")],
    *[("s", v) for v in ('["a", "a"]', '["a", "é", "d"]', '["zz"]', "[1]", '"a"', "[]")],
    *[("t", v) for v in ('["a", "b", "c"]', '["x", "y"]', '["a", "zz", "b"]', "[null]")],
    *[("h", v) for v in ('"\\ud800"', "1", "null", '"\u6771"', '""')],
    # orjson refuses the lone surrogate, the reference drops the id: a good record merged in
    ("id", '"\\ud800"'),
]


def good_structured(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "id": i,
        "v": [rng.uniform(-2, 2) for _ in range(4)],
        "w": [rng.choice([0, 1, rng.uniform(-1e-3, 1e-3)]) for _ in range(3)],
        "f": [rng.gauss(0, 0.5) for _ in range(5)],
        "s": rng.sample(["a", "é", 'q"', "d"], rng.randint(0, 2)),
        "t": rng.sample(["a", "b", "c", "x"], rng.randint(0, 4)),
        "h": rng.choice(["x", "y", "é"]),
    }


def test_structured_kinds_give_identical_bytes_and_reasons() -> None:
    rng = random.Random(8)
    messages = [json.dumps(good_structured(rng, i)).encode() for i in range(600)]
    for i, (name, text) in enumerate(STRUCTURED_EDGES):
        record = good_structured(rng, i)
        pairs = [(k, text if k == name else json.dumps(v)) for k, v in record.items()]
        raw = "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in pairs) + "}"
        messages.insert(7 * i, raw.encode())
    messages.append(
        json.dumps({k: v for k, v in good_structured(rng, 0).items() if k != "v"}).encode()
    )
    plan = plan_of(STRUCTURED)
    result = assert_same(plan, messages)
    # an element beyond the double range is clamped, so no structured row is not_finite
    assert {d.reason for d in result.dead_letters} >= {"wrong_type", "wrong_shape"}
    assert 7 * (len(STRUCTURED_EDGES) - 1) in result.output_index  # the id edge, merged in
    # the tiny vector's released values are below 1e-4 in some rows: json.dumps wrote them
    assert any(b"e-" in out.split(b'"w":')[1].split(b"]")[0] for out in result.outputs)
    # one bad record among good ones: the whole-column check must catch it alone
    for i in range(len(STRUCTURED_EDGES)):
        batch = [json.dumps(good_structured(rng, j)).encode() for j in range(20)]
        batch[i % 20] = messages[7 * i]
        assert_same(plan, batch)


def test_float_rows_texts_match_json_dumps() -> None:
    """orjson's numpy rows against json.dumps of the same floats, edges and random bits."""
    from privstream.pipeline.encode import float_rows_texts

    rng = np.random.default_rng(6)
    bits = rng.integers(0, 2**64, (4_000, 16), dtype=np.uint64).view(np.float64)
    bits[~np.isfinite(bits)] = 1.0
    scales = 10.0 ** rng.integers(-8, 20, (4_000, 1))
    edges = np.array(
        [[0.0, -0.0, 1e-4, -1e-4, 9.999e-5, 1e16, 1e15, 1e22, 5e-324, 1.7976931348623157e308]]
    )
    for matrix in (bits, rng.standard_normal((4_000, 16)) * scales, edges):
        rows = list(matrix)
        assert float_rows_texts(rows) == [
            json.dumps(r.tolist(), separators=(",", ":")).encode() for r in rows
        ]
    assert float_rows_texts([]) == []


def test_the_decoder_reuses_the_row_seed_lengths_of_its_own_messages_only() -> None:
    messages = [b'{"a":1}', b"[" * 600 + b"]" * 600, b"{}"]
    provider = noise(messages)
    assert provider.longest(messages) == 1200
    assert provider.longest(list(messages)) is None  # equal, but not the messages it serves
    assert provider.lengths().tolist() == [7, 1200, 2]
    assert provider.lengths() is provider.lengths()  # measured once per batch


#: names orjson may not cache as keys: non-ASCII, longer than 64 bytes, an escape's target
ODD_NAMES: list[dict[str, Any]] = [
    {"name": "température", "kind": "real", "bounds": [-5, 5], "epsilon": 1.0},
    {"name": "k" * 80, "kind": "public"},
    {"name": "🙂" * 20, "kind": "boolean", "epsilon": 1.0},
    {"name": "x", "kind": "integer", "bounds": [0, 10], "epsilon": 1.0},
]


def _odd(temp: str, long: str, smile: str, x: str, first: str = "") -> bytes:
    """A record of ODD_NAMES with each key spelled as given (escaped or not), ``first``
    members written before them (duplicates the decoder overwrites)."""
    members = [first] if first else []
    members += [f'"{temp}": 1.5', f'"{long}": 7', f'"{smile}": true', f'"{x}": 3']
    return ("{" + ", ".join(members) + "}").encode()


def test_field_names_orjson_does_not_cache_are_found_as_before() -> None:
    """``_own_keys`` looks fields up with the first record's own key strings; names that
    are not cached keys, spelled with escapes, missing from the first record or given
    twice in one object are still found exactly as the reference finds them."""
    plain = ("température", "k" * 80, "🙂" * 20, "x")
    escaped = ("temp\\u00e9rature", "\\u006b" * 80, "\\ud83d\\ude42" * 20, "\\u0078")
    batches = [
        [_odd(*escaped), _odd(*plain), _odd(*plain)],  # the first record spells keys escaped
        [b'{"x": 3}', _odd(*plain), _odd(*escaped)],  # the first record lacks most fields
        [_odd(*plain, first='"x": "three"'), _odd(*plain)],  # duplicate x: the last one wins
        [_odd(*plain, first='"\\u0078": 11'), _odd(*escaped, first='"x": 12')],
        [_odd(*plain, first=f'"{"k" * 80}": [1]'), _odd(*plain)],  # a long duplicate
    ]
    plan = plan_of(ODD_NAMES)
    for messages in batches:
        result = assert_same(plan, messages)
        assert result.outputs, messages  # the comparison covers released records
    # every record of the escaped and plain spellings released with the same public value
    released = assert_same(plan, batches[0])
    assert [json.loads(raw)["k" * 80] for raw in released.outputs] == [7, 7, 7]

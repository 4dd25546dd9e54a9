"""Structured field kinds through parse_config -> build_plan -> process_batch.

* ``integer``: JSON integers (and whole floats), clamped, discrete Laplace noise.
* ``set``: a list of universe strings, unary encoding (bit vector, every bit flipped).
* ``categorical`` with ``mechanism: local_hashing``: any string, reported as
  ``{"seed": s, "bucket": y}`` (optimal local hashing, Wang et al. 2017).
* config errors that tie mechanisms, calibrations, deltas and domains together.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
from privstream.config import parse_config
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.pipeline import process_batch
from privstream.pipeline.plan import RecordPlan
from privstream.testing import SeededSource

from tests.support.configs import config_dict


def enc(record: Any) -> bytes:
    return json.dumps(record).encode()


def plan_for(fields: list[dict[str, Any]], epsilon: float, delta: float = 0.0) -> RecordPlan:
    return build_plan(parse_config(config_dict(fields, epsilon=epsilon, delta=delta)))


def outputs(plan: RecordPlan, records: list[Any], seed: int) -> list[dict[str, Any]]:
    result = process_batch(plan, [enc(r) for r in records], SeededSource(seed))
    assert result.dead_letters == []
    assert result.output_index == list(range(len(records)))
    return [json.loads(o) for o in result.outputs]


def only_dead(plan: RecordPlan, raw: bytes) -> tuple[str, str]:
    result = process_batch(plan, [raw], SeededSource(0))
    assert result.outputs == []
    assert len(result.dead_letters) == 1
    return result.dead_letters[0].reason, result.dead_letters[0].detail


# --- integer -------------------------------------------------------------------------

# t = Delta/eps = 15/800; the sampler draws floor(t E) with E <= 53 ln 2 < 36.8, so
# t E < 0.7 and the noise is exactly 0: outputs are the clamped inputs
EXACT_INTEGER = [{"name": "n", "kind": "integer", "bounds": [-5, 10], "epsilon": 800.0}]


@pytest.fixture(scope="module")
def exact_integer() -> RecordPlan:
    return plan_for(EXACT_INTEGER, epsilon=800.0)


@pytest.mark.parametrize(
    ("value", "released"),
    [
        (3, 3),
        (3.0, 3),
        (-0.0, 0),
        (-5, -5),
        (10, 10),
        (-100, -5),
        (11, 10),
        (10**30, 10),
        (-(10**30), -5),
        (10**400, 10),
        (1e300, 10),
        (-1e300, -5),
        # a fraction is rounded (ties to even), never dead-lettered: whether the record
        # is released must not depend on whether the value is whole (issue 29, red team)
        (3.5, 4),
        (2.5, 2),
        (-0.25, 0),
        (5e-324, 0),
        (9.7, 10),
    ],
)
def test_integer_values_are_clamped_and_released_as_ints(
    exact_integer: RecordPlan, value: Any, released: int
) -> None:
    result = process_batch(exact_integer, [enc({"n": value})], SeededSource(1))
    assert result.dead_letters == []
    assert result.outputs == [b'{"n":%d}' % released]


@pytest.mark.parametrize("value", ["3", True, False, None, [3], {"v": 3}])
def test_integer_wrong_types_are_dead_lettered(exact_integer: RecordPlan, value: Any) -> None:
    reason, detail = only_dead(exact_integer, enc({"n": value}))
    assert reason == "wrong_type"
    assert "'n'" in detail
    if not isinstance(value, bool | type(None)):
        assert json.dumps(value) not in detail


def test_integer_outputs_are_json_integers_with_noise() -> None:
    plan = plan_for([{"name": "n", "kind": "integer", "bounds": [0, 50], "epsilon": 0.5}], 0.5)
    result = process_batch(plan, [enc({"n": 25.0})] * 400, SeededSource(2))
    assert len(result.outputs) == 400
    for raw in result.outputs:
        assert b"." not in raw
        assert b"e" not in raw
    values = [json.loads(o)["n"] for o in result.outputs]
    assert all(type(v) is int for v in values)
    # t = 100: P(all 400 draws equal) is (P(Z = z))^400 < 0.005^400
    assert len(set(values)) > 1


# --- set (unary encoding) ------------------------------------------------------------

UNIVERSE = ["ski", "chess", "go", "tennis", "golf", "piano"]


def set_field(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "hobbies",
        "kind": "set",
        "universe": UNIVERSE,
        "max_items": 2,
        "epsilon": 1.0,
    }
    spec.update(overrides)
    return spec


@pytest.fixture(scope="module")
def exact_set() -> RecordPlan:
    # symmetric variant, eps 800 over min(2k, d) = 4 differing bits: c = 200 per bit,
    # p = 1/(1 + e^-200) = 1.0 and q = e^-200/(1 + e^-200) ~ 1e-87: a bit flips only
    # when its 64-bit word is exactly 0 or 2^64 - 1 (probability 2^-63 per bit)
    return plan_for([set_field(variant="symmetric", epsilon=800.0)], epsilon=800.0)


@pytest.mark.parametrize(
    ("items", "released"),
    [
        (["go", "ski"], ["ski", "go"]),  # universe order
        (["go", "go", "ski"], ["ski", "go"]),  # repeats count once
        (["piano"], ["piano"]),
        ([], []),
    ],
)
def test_set_output_is_a_list_of_universe_items(
    exact_set: RecordPlan, items: list[str], released: list[str]
) -> None:
    assert outputs(exact_set, [{"hobbies": items}], seed=3) == [{"hobbies": released}]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("ski", "wrong_type"),
        ({"ski": True}, "wrong_type"),
        (None, "wrong_type"),
        ([1], "wrong_type"),
        (["ski", None], "wrong_type"),
        ([["ski"]], "wrong_type"),
        (["ski", "CANARY-item"], "unknown_category"),
        (["Ski"], "unknown_category"),
        (["ski", "chess", "go"], "too_many_items"),
        (["ski", "chess", "go", "ski"], "too_many_items"),
    ],
)
def test_set_bad_values_are_dead_lettered(exact_set: RecordPlan, value: Any, reason: str) -> None:
    got, detail = only_dead(exact_set, enc({"hobbies": value}))
    assert got == reason
    assert "'hobbies'" in detail
    assert "CANARY" not in detail


def test_set_bits_follow_oue_probabilities() -> None:
    # optimized unary encoding, d = 6 >= 2k = 4: per-item eps e1 = eps/k = 0.5,
    # P(1 -> 1) = 1/2, P(0 -> 1) = 1/(e^e1 + 1)
    plan = plan_for([set_field(epsilon=1.0)], epsilon=1.0)
    n = 20_000
    outs = outputs(plan, [{"hobbies": ["go", "ski"]}] * n, seed=4)
    p, q = 0.5, 1.0 / (math.exp(0.5) + 1.0)
    for out in outs:
        items = out["hobbies"]
        assert items == [u for u in UNIVERSE if u in items]  # universe order, no repeats
    for item in UNIVERSE:
        count = sum(item in out["hobbies"] for out in outs)
        rate = p if item in ("go", "ski") else q
        sd = math.sqrt(n * rate * (1 - rate))
        # 5 sd per item, 6 items: false-failure probability < 4e-6
        assert abs(count - n * rate) < 5 * sd, item


def test_set_mechanism_carries_the_field_budget() -> None:
    plan = plan_for([set_field(epsilon="auto")], epsilon=1.5)
    mech = plan.handlers[0].mechanism
    assert mech is not None
    assert mech.name == "unary_encoding"
    assert mech.epsilon == 1.5
    assert mech.delta == 0.0


# --- categorical with local hashing --------------------------------------------------

MASK = 2**64 - 1


def reference_bucket(value: str, seed: int, buckets: int) -> int:
    """splitmix64(blake2b64_le(utf8(v)) ^ seed) mod g, written out in Python ints."""
    z = int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "little")
    z = ((z ^ seed) + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return (z ^ (z >> 31)) % buckets


def hashed_plan(eps: float) -> RecordPlan:
    spec = {"name": "city", "kind": "categorical", "mechanism": "local_hashing", "epsilon": eps}
    return plan_for([spec], epsilon=eps)


def test_local_hashing_reports_seed_and_bucket() -> None:
    eps = 2.0
    g = math.floor(math.exp(eps) + 0.5) + 1  # g = round(e^eps) + 1 = 8
    plan = hashed_plan(eps)
    n = 5_000
    cities = [f"city-{i % 37}" for i in range(n)]
    outs = outputs(plan, [{"city": c} for c in cities], seed=5)
    truthful = 0
    for city, out in zip(cities, outs, strict=True):
        assert list(out) == ["city"]
        report = out["city"]
        assert set(report) == {"seed", "bucket"}
        assert type(report["seed"]) is int
        assert type(report["bucket"]) is int
        assert 0 <= report["seed"] <= MASK
        assert 0 <= report["bucket"] < g
        truthful += report["bucket"] == reference_bucket(city, report["seed"], g)
    # P(report = H_s(v)) = e^eps / (e^eps + g - 1); 6 sd: false-failure probability < 2e-9
    p = math.exp(eps) / (math.exp(eps) + g - 1)
    assert abs(truthful - n * p) < 6 * math.sqrt(n * p * (1 - p))


def test_local_hashing_at_huge_epsilon_reports_the_true_bucket() -> None:
    # g - 1 is capped at 2^32; at eps 800 the flip probability is below 2^-64
    plan = hashed_plan(800.0)
    values = ["", "a", "Zürich", "emoji \U0001f600", "x" * 1000]
    outs = outputs(plan, [{"city": v} for v in values], seed=6)
    for value, out in zip(values, outs, strict=True):
        seed, bucket = out["city"]["seed"], out["city"]["bucket"]
        assert bucket == reference_bucket(value, seed, 2**32 + 1)


@pytest.mark.parametrize("value", [5, 1.5, None, True, ["x"], {"x": 1}])
def test_local_hashing_non_strings_are_wrong_type(value: Any) -> None:
    reason, detail = only_dead(hashed_plan(2.0), enc({"city": value}))
    assert reason == "wrong_type"
    assert "'city'" in detail


def test_local_hashing_releases_a_lone_surrogate_like_any_string() -> None:
    """Released as any other string is (issue 29): refusing it would make the release
    depend on the value."""
    plan = hashed_plan(2.0)
    batch = [b'{"city": "ok"}', b'{"city": "\\ud800"}', b'{"city": "fine"}']
    result = process_batch(plan, batch, SeededSource(7))
    assert result.output_index == [0, 1, 2]
    assert set(json.loads(result.outputs[1])["city"]) == {"seed", "bucket"}


# --- config errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"kind": "categorical", "mechanism": "local_hashing", "epsilon": 1, "delta": 1e-6},
            "local_hashing is pure epsilon-DP; set delta to 0",
        ),
        (
            {
                "kind": "categorical",
                "mechanism": "local_hashing",
                "epsilon": 1,
                "domain": ["a", "b"],
            },
            "local_hashing takes any string; remove domain and unknown_as",
        ),
        (
            {"kind": "categorical", "mechanism": "local_hashing", "epsilon": 1, "unknown_as": "a"},
            "local_hashing takes any string; remove domain and unknown_as",
        ),
        (
            {"kind": "real", "mechanism": "gaussian", "bounds": [0, 1], "epsilon": 1},
            "the gaussian mechanism needs delta > 0",
        ),
        (
            {
                "kind": "real",
                "mechanism": "laplace",
                "bounds": [0, 1],
                "epsilon": 1,
                "calibration": "analytic",
            },
            "calibration 'analytic' does not apply to laplace; use one of tight, thesis",
        ),
        (
            {
                "kind": "real",
                "mechanism": "laplace",
                "bounds": [0, 1],
                "epsilon": 1,
                "calibration": "classical",
            },
            "calibration 'classical' does not apply to laplace; use one of tight, thesis",
        ),
        (
            {
                "kind": "real",
                "mechanism": "gaussian",
                "bounds": [0, 1],
                "epsilon": 1,
                "delta": 1e-6,
                "calibration": "tight",
            },
            "calibration 'tight' does not apply to gaussian; use one of analytic, classical",
        ),
        (
            {"kind": "categorical", "mechanism": "randomized_response", "epsilon": 1},
            "randomized_response needs a domain; list it or use local_hashing",
        ),
        (
            {"kind": "categorical", "epsilon": 1, "delta": 1e-6},
            "auto without a domain is local_hashing, which is pure epsilon-DP; "
            "set delta to 0 or list the domain",
        ),
        (
            {"kind": "set", "universe": ["a", "b"], "max_items": 1, "epsilon": 1, "delta": 1e-6},
            "unary_encoding is pure epsilon-DP; set delta to 0",
        ),
    ],
)
def test_mechanism_config_mismatches_are_one_line_each(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(config_dict([{"name": "f", **spec}], epsilon=1.0, delta=1e-3))
    assert len(info.value.problems) == 1
    line = info.value.problems[0]
    assert line.startswith("fields[0] (f)")
    assert message in line


@pytest.mark.parametrize(
    ("overrides", "where"),
    [
        ({"universe": ["a", 1]}, "fields[0] (hobbies).universe[1]"),
        ({"universe": ["a"]}, "fields[0] (hobbies).universe"),
        ({"universe": ["a", "a"]}, "fields[0] (hobbies).universe"),
        ({"max_items": 0}, "fields[0] (hobbies).max_items"),
        ({"variant": "rappor"}, "fields[0] (hobbies).variant"),
    ],
)
def test_set_config_errors_name_the_key(overrides: dict[str, Any], where: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(config_dict([set_field(**overrides)], epsilon=1.0))
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith(where + ": ")

"""The pure batch transform: fail-closed output, dead-letter reasons, index partition."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from privstream.config import parse_config
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.pipeline import BatchResult, process_batch
from privstream.pipeline.plan import RecordPlan
from privstream.testing import SeededSource
from scipy import stats

from tests.support.configs import config_dict, laplace_thesis_scale, laplace_tight_scale

FIELDS: list[dict[str, Any]] = [
    {"name": "device_id", "kind": "drop"},
    {"name": "ts", "kind": "public"},
    {
        "name": "salary",
        "kind": "real",
        "mechanism": "laplace",
        "bounds": [1504, 4500],
        "epsilon": 1.0,
    },
    {"name": "state", "kind": "categorical", "domain": ["TX", "CA", "NY"], "epsilon": 1.0},
    {"name": "code", "kind": "categorical", "domain": ["1", 2], "epsilon": 0.5},
    {"name": "flag", "kind": "boolean", "epsilon": 0.5},
]
RELEASED = ["ts", "salary", "state", "code", "flag"]


@pytest.fixture(scope="module")
def plan() -> RecordPlan:
    return build_plan(parse_config(config_dict(FIELDS, epsilon=3.0, delta=1e-6)))


def good(**overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "device_id": "dev-CANARY-0001",
        "ts": 1_700_000_000,
        "salary": 3000.5,
        "state": "CA",
        "code": 2,
        "flag": True,
    }
    record.update(overrides)
    return record


def enc(record: Any) -> bytes:
    return json.dumps(record).encode()


def strict_loads(raw: bytes) -> Any:
    def reject(token: str) -> None:
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(raw.decode("utf-8"), parse_constant=reject)


def assert_partition(result: BatchResult, n: int) -> None:
    assert len(result.outputs) == len(result.output_index)
    dead = [d.index for d in result.dead_letters]
    assert sorted(result.output_index + dead) == list(range(n))
    assert result.output_index == sorted(result.output_index)


def only_dead(plan: RecordPlan, raw: bytes) -> tuple[str, str]:
    result = process_batch(plan, [raw], SeededSource(0))
    assert result.outputs == []
    assert result.output_index == []
    assert len(result.dead_letters) == 1
    dead = result.dead_letters[0]
    assert dead.index == 0
    return dead.reason, dead.detail


# --- the plan ------------------------------------------------------------------------


def test_plan_lists_released_fields_in_config_order(plan: RecordPlan) -> None:
    assert [h.name for h in plan.handlers] == RELEASED
    assert tuple(f.kind for f in plan.fields) == (
        "public",
        "real",
        "categorical",
        "categorical",
        "boolean",
    )
    assert plan.epsilon == pytest.approx(3.0)
    assert plan.delta == 0.0


def test_plan_mechanisms_carry_config_calibration() -> None:
    fields = [
        {
            "name": "a",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": [0, 10],
            "epsilon": 0.5,
            "delta": 0.01,
        },
        {
            "name": "b",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": [0, 10],
            "epsilon": 0.5,
            "delta": 0.01,
            "calibration": "thesis",
        },
    ]
    p = build_plan(parse_config(config_dict(fields, epsilon=1.0, delta=0.02)))
    a, b = (h.mechanism for h in p.handlers)
    assert a.continuous_scale == pytest.approx(laplace_tight_scale(10, 0.5, 0.01), rel=1e-12)  # type: ignore[union-attr]
    assert b.continuous_scale == pytest.approx(laplace_thesis_scale(10, 0.5, 0.01), rel=1e-12)  # type: ignore[union-attr]
    assert p.epsilon == pytest.approx(1.0)
    assert p.delta == pytest.approx(0.02)


# --- good records --------------------------------------------------------------------


def test_good_records_are_sanitized_with_exact_keys(plan: RecordPlan) -> None:
    records = [good(), good(state="TX", flag=False, code="1"), good(salary=1e9, ts="t")]
    result = process_batch(plan, [enc(r) for r in records], SeededSource(7))
    assert result.dead_letters == []
    assert result.output_index == [0, 1, 2]
    for raw_in, raw_out in zip(records, result.outputs, strict=True):
        out = strict_loads(raw_out)
        assert list(out) == RELEASED
        assert out["ts"] == raw_in["ts"]
        assert isinstance(out["salary"], float)
        assert math.isfinite(out["salary"])
        assert out["state"] in ("TX", "CA", "NY")
        assert out["code"] in ("1", 2)
        assert isinstance(out["flag"], bool)
        assert b"CANARY" not in raw_out


def test_unknown_and_drop_fields_never_appear(plan: RecordPlan) -> None:
    record = good(extra_field="EXTRA-CANARY-77", nested={"device_id": "x"})
    result = process_batch(plan, [enc(record)], SeededSource(8))
    assert len(result.outputs) == 1
    out = strict_loads(result.outputs[0])
    assert set(out) == set(RELEASED)
    assert b"CANARY" not in result.outputs[0]
    assert b"device_id" not in result.outputs[0]


def test_field_order_in_input_does_not_matter(plan: RecordPlan) -> None:
    record = dict(reversed(list(good().items())))
    result = process_batch(plan, [enc(record)], SeededSource(9))
    assert list(strict_loads(result.outputs[0])) == RELEASED


def test_empty_batch(plan: RecordPlan) -> None:
    result = process_batch(plan, [], SeededSource(1))
    assert result == BatchResult()


def test_high_epsilon_categorical_is_kept_and_unknown_as_maps() -> None:
    # at eps = 800, p = e^-800/... underflows to 0: the kept value is deterministic
    fields = [
        {
            "name": "country",
            "kind": "categorical",
            "domain": ["US", "DE", "other"],
            "unknown_as": "other",
            "epsilon": 800.0,
        },
        {"name": "flag", "kind": "boolean", "epsilon": 800.0},
    ]
    p = build_plan(parse_config(config_dict(fields, epsilon=1600.0)))
    batch = [
        enc({"country": "DE", "flag": True}),
        enc({"country": "FR", "flag": False}),
        enc({"country": "US", "flag": False}),
        enc({"country": 7, "flag": True}),
    ]
    result = process_batch(p, batch, SeededSource(10))
    assert result.dead_letters == []
    outs = [strict_loads(o) for o in result.outputs]
    assert outs == [
        {"country": "DE", "flag": True},
        {"country": "other", "flag": False},
        {"country": "US", "flag": False},
        {"country": "other", "flag": True},
    ]


def test_pipeline_noise_has_the_configured_laplace_scale() -> None:
    fields = [
        {
            "name": "x",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": [-20, 60],
            "epsilon": 0.5,
            "delta": 1e-6,
        }
    ]
    p = build_plan(parse_config(config_dict(fields, epsilon=0.5, delta=1e-6)))
    n = 20_000
    result = process_batch(p, [b'{"x": 100}'] * n, SeededSource(11))
    noise = np.array([json.loads(o)["x"] for o in result.outputs]) - 60.0  # clamped to hi
    b = laplace_tight_scale(80.0, 0.5, 1e-6)
    # alpha = 1e-4 (KS test, fixed seed)
    assert stats.kstest(noise, stats.laplace(scale=b).cdf).pvalue > 1e-4


def test_pipeline_categorical_frequencies_follow_rr() -> None:
    fields = [{"name": "s", "kind": "categorical", "domain": ["TX", "CA", "NY"], "epsilon": 1.0}]
    p = build_plan(parse_config(config_dict(fields, epsilon=1.0)))
    n = 20_000
    result = process_batch(p, [b'{"s": "NY"}'] * n, SeededSource(12))
    values = [json.loads(o)["s"] for o in result.outputs]
    counts = [values.count(v) for v in ("TX", "CA", "NY")]
    q = 1.0 / (2.0 + math.e)
    # alpha = 1e-4 (chi-square, fixed seed)
    assert stats.chisquare(counts, [n * q, n * q, n * (1 - 2 * q)]).pvalue > 1e-4


# --- dead letters --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"salary": 3000, ', "invalid_json"),
        (b"", "invalid_json"),
        (b"not json at all CANARY", "invalid_json"),
        (
            b'{"device_id":"a","ts":1,"salary":NaN,"state":"CA","code":2,"flag":true}',
            "invalid_json",
        ),
        (
            b'{"device_id":"a","ts":Infinity,"salary":1,"state":"CA","code":2,"flag":true}',
            "invalid_json",
        ),
        (
            b'{"device_id":"a","ts":1,"salary":-Infinity,"state":"CA","code":2,"flag":true}',
            "invalid_json",
        ),
        (b"[" * 100_000, "invalid_json"),
        (b'{"salary": "\xff\xfe CANARY"}', "invalid_utf8"),
        (b"\xc3\x28", "invalid_utf8"),
        (b"[1, 2, 3]", "not_object"),
        (b'"CANARY"', "not_object"),
        (b"42", "not_object"),
        (b"null", "not_object"),
    ],
)
def test_undecodable_messages(plan: RecordPlan, raw: bytes, reason: str) -> None:
    got_reason, detail = only_dead(plan, raw)
    assert got_reason == reason
    assert "CANARY" not in detail


@pytest.mark.parametrize("missing", ["ts", "salary", "state", "code", "flag"])
def test_missing_field(plan: RecordPlan, missing: str) -> None:
    record = good()
    del record[missing]
    reason, detail = only_dead(plan, enc(record))
    assert reason == "missing_field"
    assert repr(missing) in detail


def test_missing_drop_field_is_fine(plan: RecordPlan) -> None:
    record = good()
    del record["device_id"]
    result = process_batch(plan, [enc(record)], SeededSource(1))
    assert result.dead_letters == []
    assert len(result.outputs) == 1


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("salary", "CANARY-4000", "wrong_type"),
        ("salary", True, "wrong_type"),
        ("salary", None, "wrong_type"),
        ("salary", [4000], "wrong_type"),
        ("salary", {"v": 4000}, "wrong_type"),
        ("flag", 1, "wrong_type"),
        ("flag", 0, "wrong_type"),
        ("flag", "true", "wrong_type"),
        ("flag", None, "wrong_type"),
        ("state", True, "wrong_type"),
        ("state", None, "wrong_type"),
        ("state", 3.5, "wrong_type"),
        ("code", 1, "unknown_category"),  # domain has "1", not 1
        ("code", "2", "unknown_category"),  # domain has 2, not "2"
        ("code", 2.0, "wrong_type"),
        ("code", False, "wrong_type"),
        ("state", "CANARY-ZZ", "unknown_category"),
        ("state", "tx", "unknown_category"),
    ],
)
def test_wrong_values(plan: RecordPlan, field: str, value: Any, reason: str) -> None:
    got, detail = only_dead(plan, enc(good(**{field: value})))
    assert got == reason
    assert repr(field) in detail
    assert "CANARY" not in detail
    if not isinstance(value, bool | type(None)):
        assert json.dumps(value) not in detail


HUGE_LITERALS = [b"1e999", b"-1e999", b"1" + b"0" * 400, b"-" + b"9" * 400]


@pytest.mark.parametrize("literal", HUGE_LITERALS)
def test_numbers_beyond_the_double_range_are_clamped_like_any_out_of_range_value(
    plan: RecordPlan, literal: bytes
) -> None:
    # refusing them would make the release depend on the value (released at 1e308, not 1e309)
    bound = b"1504" if literal.startswith(b"-") else b"4500"
    head = b'{"device_id":"a","ts":1,"salary":'
    tail = b',"state":"CA","code":2,"flag":true}'
    huge = process_batch(plan, [head + literal + tail], SeededSource(3))
    at_bound = process_batch(plan, [head + bound + tail], SeededSource(3))
    assert huge.dead_letters == []
    assert huge.outputs == at_bound.outputs
    assert huge.observations["salary"].clamped == 1


@pytest.mark.parametrize("literal", [b"1e999", b"-1e999"])
def test_a_public_number_beyond_the_double_range_is_not_finite(
    plan: RecordPlan, literal: bytes
) -> None:
    raw = b'{"device_id":"a","ts":' + literal + b',"salary":1,"state":"CA","code":2,"flag":true}'
    reason, detail = only_dead(plan, raw)
    assert reason == "not_finite"
    assert "'ts'" in detail
    assert "999" not in detail


def test_bad_record_does_not_affect_neighbours(plan: RecordPlan) -> None:
    batch = [
        enc(good()),
        b"{broken",
        enc(good(state="NOPE")),
        enc(good()),
        b'"x"',
        enc(good(salary="3000")),
        enc(good(flag=1)),
        enc(good(extra=1)),
    ]
    result = process_batch(plan, batch, SeededSource(13))
    assert_partition(result, len(batch))
    assert result.output_index == [0, 3, 7]
    assert [(d.index, d.reason) for d in result.dead_letters] == [
        (1, "invalid_json"),
        (2, "unknown_category"),
        (4, "not_object"),
        (5, "wrong_type"),
        (6, "wrong_type"),
    ]


@pytest.mark.parametrize("value", [["CA"], {"state": "CA"}])
def test_container_for_categorical_is_wrong_type(plan: RecordPlan, value: Any) -> None:
    reason, _ = only_dead(plan, enc(good(state=value)))
    assert reason == "wrong_type"


@pytest.mark.parametrize("literal", [b"1e999", b"-1e999"])
def test_public_field_output_is_always_strict_json(plan: RecordPlan, literal: bytes) -> None:
    raw = b'{"ts":' + literal + b',"salary":1,"state":"CA","code":2,"flag":true}'
    result = process_batch(plan, [raw], SeededSource(14))
    for out in result.outputs:
        strict_loads(out)  # raises ValueError on Infinity


def test_config_with_only_drop_fields_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(config_dict([{"name": "id", "kind": "drop"}], epsilon=1.0))
    assert info.value.problems == [
        "fields: no field would be released (none listed, or all are kind drop); "
        "list the fields to release"
    ]


# --- property: never raises, always partitions ---------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["TX", "CA", "NY", "1", 2, 1, "2"])
)
CATEGORICAL = {"state", "code"}
safe_keys = st.text(max_size=5).filter(lambda k: k not in CATEGORICAL)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(safe_keys, inner, max_size=3),
    max_leaves=6,
)
# names whose values may be anything; the categorical ones get their own strategy
other_names = st.sampled_from(["ts", "salary", "flag", "device_id", "other"])


def record_strategy(values_for_categorical: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """Raw messages: partial records, complete records, arbitrary bytes and JSON values.

    Only ``values_for_categorical`` ever lands in the categorical fields.
    """

    def build(d: dict[str, Any], cat: dict[str, Any]) -> bytes:
        return json.dumps({**d, **cat}).encode()

    cats = st.dictionaries(st.sampled_from(sorted(CATEGORICAL)), values_for_categorical, max_size=2)
    records = st.builds(build, st.dictionaries(other_names, json_values, max_size=5), cats)
    full = st.builds(
        lambda ts, sal, st_, code, flag: json.dumps(
            {"ts": ts, "salary": sal, "state": st_, "code": code, "flag": flag}
        ).encode(),
        json_values,
        json_scalars,
        values_for_categorical,
        values_for_categorical,
        json_scalars,
    )
    return records | full | st.binary(max_size=40) | json_values.map(lambda v: enc(v))


FAST = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _check(plan: RecordPlan, batch: list[bytes]) -> None:
    result = process_batch(plan, batch, SeededSource(99))
    assert_partition(result, len(batch))
    for out in result.outputs:
        assert list(strict_loads(out)) == RELEASED
    for dead in result.dead_letters:
        assert dead.reason in {
            "invalid_json",
            "invalid_utf8",
            "not_object",
            "missing_field",
            "wrong_type",
            "unknown_category",
            "not_finite",
            "nested_public",
        }


@FAST
@given(batch=st.lists(record_strategy(json_scalars), max_size=8))
def test_property_never_raises_and_partitions(plan: RecordPlan, batch: list[bytes]) -> None:
    _check(plan, batch)


@FAST
@given(batch=st.lists(record_strategy(json_values), max_size=8))
@example(batch=[enc(good(code=[1]))])
def test_property_with_container_categorical_values(plan: RecordPlan, batch: list[bytes]) -> None:
    _check(plan, batch)

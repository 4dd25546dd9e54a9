"""``memoize_by``: RAPPOR's permanent randomized response on categorical and boolean fields.

A memoized field's answer is a pure function of (secret, field name and
release parameters, memo value, true value): the same device reporting the
same value gets the same answer in every batch, partition and offset, while
other devices, other values and other parameters get independent answers.

Statistical tests use fixed keys, so they are deterministic; the stated
false-failure probabilities treat the PRF (keyed BLAKE2b) as a random
function, i.e. they are the probability that a random key would fail.
Bounds are 5 standard deviations (normal approximation, two-sided tail
5.7e-7 per check).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from privstream.config import config_sha256, parse_config
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.mechanisms.local_hashing import hash_to_bucket, value_digests
from privstream.mechanisms.rng import MemoSource, NoiseKeys, derive_memo_key
from privstream.pipeline import BatchResult, process_batch
from privstream.pipeline.noise import Fresh, Replayable
from privstream.pipeline.plan import MemoPlan, RecordPlan, canonical_json, field_identity
from privstream.testing import SeededSource

from tests.support.configs import config_dict, rr_p

SECRET = bytes(range(32))
OTHER_SECRET = bytes(range(1, 33))
TOPIC = "raw"
PROTECTION_PAGE = Path(__file__).resolve().parents[3] / "docs" / "protection.md"

DEVICE: dict[str, Any] = {"name": "device", "kind": "drop"}
TS: dict[str, Any] = {"name": "ts", "kind": "public"}
SALARY: dict[str, Any] = {
    "name": "salary",
    "kind": "real",
    "mechanism": "laplace",
    "bounds": [0, 5000],
    "epsilon": 1.0,
}
STATE: dict[str, Any] = {
    "name": "state",
    "kind": "categorical",
    "domain": ["TX", "CA", "NY"],
    "unknown_as": "NY",
    "epsilon": 1.0,
    "memoize_by": "device",
    "memo_identity_trusted": True,
}
FLAG: dict[str, Any] = {
    "name": "flag",
    "kind": "boolean",
    "epsilon": 0.5,
    "memoize_by": "device",
    "memo_identity_trusted": True,
}
CITY: dict[str, Any] = {
    "name": "city",
    "kind": "categorical",
    "mechanism": "local_hashing",
    "epsilon": 2.0,
    "memoize_by": "device",
    "memo_identity_trusted": True,
}
FIELDS = [DEVICE, TS, SALARY, STATE, FLAG, CITY]


def unmemoized(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k not in ("memoize_by", "memo_identity_trusted")}


RELEASED = ["ts", "salary", "state", "flag", "city"]
MEMOIZED = ["state", "flag", "city"]


def make_plan(fields: list[dict[str, Any]] = FIELDS, epsilon: float = 10.0) -> RecordPlan:
    return build_plan(parse_config(config_dict(fields, epsilon=epsilon, delta=1e-5)))


@pytest.fixture(scope="module")
def plan() -> RecordPlan:
    return make_plan()


def record(device: Any, state: str = "TX", flag: bool = True, city: str = "Ljubljana") -> bytes:
    return json.dumps(
        {"device": device, "ts": 1, "salary": 2500.0, "state": state, "flag": flag, "city": city}
    ).encode()


def replayable(
    messages: list[bytes], *, partition: int = 0, first_offset: int = 0, secret: bytes = SECRET
) -> Replayable:
    n = len(messages)
    return Replayable(
        NoiseKeys(secret, TOPIC),
        np.full(n, partition, dtype=np.int64),
        np.arange(first_offset, first_offset + n, dtype=np.int64),
        messages,
    )


def release(
    plan: RecordPlan, messages: list[bytes], *, partition: int = 0, first_offset: int = 0, **kw: Any
) -> BatchResult:
    noise = replayable(messages, partition=partition, first_offset=first_offset, **kw)
    return process_batch(plan, messages, noise)


def column(result: BatchResult, field: str) -> list[Any]:
    return [json.loads(out)[field] for out in result.outputs]


def within(count: int, n: int, probability: float, sigmas: float = 5.0) -> bool:
    return abs(count - n * probability) <= sigmas * math.sqrt(n * probability * (1 - probability))


# --- keys and the memo source -----------------------------------------------------------


@pytest.mark.parametrize("topic", ["", "raw", "memo", "privstream/memo/v1", "\x00"])
def test_memo_key_differs_from_every_stream_key(topic: str) -> None:
    keys = NoiseKeys(SECRET, topic)
    assert keys.memo == derive_memo_key(SECRET, topic.encode(), b"")
    assert keys.memo not in (keys.row, keys.field(b"release"))


def test_memo_key_is_deterministic_and_secret_dependent() -> None:
    key = derive_memo_key(SECRET)
    assert len(key) == 32
    assert derive_memo_key(SECRET) == key
    assert derive_memo_key(OTHER_SECRET) != key


def test_memo_key_needs_a_long_secret() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        derive_memo_key(b"short")


def test_memo_source_is_a_function_of_its_inputs() -> None:
    key = derive_memo_key(SECRET)
    tokens = [b"a", b"b", b"a", b""]
    words = MemoSource(key, b"scope", tokens).words(4, 3)
    assert words.shape == (4, 3)
    assert words.dtype == np.uint64
    assert np.array_equal(MemoSource(key, b"scope", tokens).words(4, 3), words)
    assert np.array_equal(words[0], words[2])  # same token, same words
    assert len({tuple(row) for row in words[[0, 1, 3]].tolist()}) == 3
    other_scope = MemoSource(key, b"scope2", tokens).words(4, 3)
    other_key = MemoSource(derive_memo_key(OTHER_SECRET), b"scope", tokens).words(4, 3)
    assert not np.any(other_scope == words)
    assert not np.any(other_key == words)


def test_memo_source_encoding_is_unambiguous() -> None:
    # length prefixes: moving bytes between scope and token changes the words
    key = derive_memo_key(SECRET)
    a = MemoSource(key, b"ab", [b"c"]).words(1, 2)
    b = MemoSource(key, b"a", [b"bc"]).words(1, 2)
    assert not np.any(a == b)


def test_memo_source_wide_rows_extend_narrow_ones() -> None:
    # more words than one 64-byte block: counter blocks, the first words unchanged
    source = MemoSource(derive_memo_key(SECRET), b"s", [b"x", b"y"])
    wide = source.words(2, 20)
    assert wide.shape == (2, 20)
    assert np.array_equal(wide[:, :3], source.words(2, 3))
    assert len(set(wide.ravel().tolist())) == 40
    assert source.words(2, 0).shape == (2, 0)
    assert MemoSource(derive_memo_key(SECRET), b"s", []).words(0, 2).shape == (0, 2)


def test_memo_source_checks_rows_and_key() -> None:
    with pytest.raises(ValueError, match="bound to 2 rows"):
        MemoSource(derive_memo_key(SECRET), b"s", [b"x", b"y"]).words(3, 2)
    with pytest.raises(ValueError, match="memo key"):
        MemoSource(b"short", b"s", [b"x"])


def test_memo_source_words_look_uniform() -> None:
    # each of the 64 bits is set with probability 1/2: 5-sigma bounds over 20000 words,
    # false-failure probability < 64 * 5.7e-7 < 4e-5
    n = 10_000
    words = MemoSource(derive_memo_key(SECRET), b"s", [str(i).encode() for i in range(n)]).words(
        n, 2
    )
    bits = (words.ravel()[:, None] >> np.arange(64, dtype=np.uint64)) & np.uint64(1)
    for count in bits.sum(axis=0).tolist():
        assert within(count, 2 * n, 0.5)


# --- the config ---------------------------------------------------------------------------


def problems_of(fields: list[dict[str, Any]]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(config_dict(fields))
    return info.value.problems


def test_unknown_memo_field_is_a_config_error() -> None:
    problems = problems_of([DEVICE, {**STATE, "memoize_by": "device_id"}])
    assert len(problems) == 1
    assert problems[0].startswith("fields[1] (state).memoize_by: no field named 'device_id'")
    assert "fix the name" in problems[0]


def test_self_reference_is_a_config_error() -> None:
    problems = problems_of([DEVICE, TS, {**FLAG, "memoize_by": "flag"}])
    assert len(problems) == 1
    assert problems[0].startswith("fields[2] (flag).memoize_by: a field cannot be memoized by")


NOISED_MEMO_FIELDS = {
    "real": SALARY,
    "boolean": {**unmemoized(FLAG), "name": "other"},
    "integer": {"name": "other", "kind": "integer", "bounds": [0, 9], "epsilon": 1.0},
    "categorical": {"name": "other", "kind": "categorical", "domain": ["a", "b"], "epsilon": 1},
}


@pytest.mark.parametrize("kind", sorted(NOISED_MEMO_FIELDS))
def test_a_noised_field_is_never_a_memo_identity(kind: str) -> None:
    # issue 29: a memo keyed by a noised field's raw value groups the answers by that
    # value, which gives it away (tests/unit/pipeline/test_memo_redteam.py plays it)
    other = NOISED_MEMO_FIELDS[kind]
    problems = problems_of([other, {**STATE, "memoize_by": other["name"]}])
    assert len(problems) == 1
    assert problems[0].startswith("fields[1] (state).memoize_by: field ")
    assert f"of kind {kind}, which is released with noise" in problems[0]
    assert "kind drop" in problems[0]
    assert "memo_identity: message_key" in problems[0]


def test_every_memo_problem_gets_its_own_line() -> None:
    fields = [{**STATE, "memoize_by": "nope"}, {**FLAG, "memoize_by": "flag"}]
    problems = problems_of(fields)
    assert [p.split(":")[0] for p in problems] == [
        "fields[0] (state).memoize_by",
        "fields[1] (flag).memoize_by",
    ]


@pytest.mark.parametrize("value", ["", 3, ["device"]])
def test_memoize_by_must_be_a_field_name(value: Any) -> None:
    problems = problems_of([DEVICE, {**STATE, "memoize_by": value}])
    assert problems
    assert all(p.startswith("fields[1] (state).memoize_by") for p in problems)


@pytest.mark.parametrize("kind", ["real", "integer", "set"])
def test_memoize_by_only_exists_on_categorical_and_boolean(kind: str) -> None:
    spec = {
        "real": SALARY,
        "integer": {"name": "n", "kind": "integer", "bounds": [0, 9], "epsilon": 1.0},
        "set": {"name": "s", "kind": "set", "universe": ["a", "b"], "max_items": 1, "epsilon": 1},
    }[kind]
    problems = problems_of([DEVICE, {**spec, "memoize_by": "device"}])
    assert len(problems) == 1
    assert problems[0].endswith(
        "memoize_by: unknown key; remove it or check its spelling (docs/configuration.md)"
    )


@pytest.mark.parametrize(
    "memo_spec",
    [
        {"name": "id", "kind": "public"},
        {"name": "id", "kind": "drop"},
    ],
)
def test_unnoised_identifier_kinds_may_be_memo_fields(memo_spec: dict[str, Any]) -> None:
    config = parse_config(config_dict([memo_spec, {**STATE, "memoize_by": "id"}]))
    assert build_plan(config).fields[-1].memo is not None


def test_local_hashing_can_be_memoized(plan: RecordPlan) -> None:
    # supported: the per-record seed and the bucket noise are both memo words, so the
    # report (seed, bucket) is a function of (device, value) and distributed exactly as OLH
    memo = plan.fields[RELEASED.index("city")].memo
    assert memo is not None
    assert memo.field == "device"
    assert memo.domain is None
    assert json.loads(memo.scope)["mechanism"] == "local_hashing"


def test_memoize_by_changes_the_config_hash() -> None:
    plain = parse_config(config_dict([DEVICE, unmemoized(STATE)]))
    memoized = parse_config(config_dict([DEVICE, STATE]))
    assert config_sha256(plain) != config_sha256(memoized)


def test_plan_records_memo_per_handler(plan: RecordPlan) -> None:
    fields = {f.name: f.memo for f in plan.fields}
    assert fields["ts"] is None
    assert fields["salary"] is None
    assert all(isinstance(fields[name], MemoPlan) for name in MEMOIZED)
    assert [f.memo for f in make_plan([DEVICE, SALARY], epsilon=1.0).fields] == [None]


# --- what keys a memo: names and parameters, not positions -------------------------------


def scopes(plan: RecordPlan) -> dict[str, bytes]:
    return {f.name: f.memo.scope for f in plan.fields if f.memo}


def test_field_order_and_domain_order_keep_the_memo(plan: RecordPlan) -> None:
    reordered = [CITY, {**STATE, "domain": ["NY", "TX", "CA"]}, TS, DEVICE, FLAG, SALARY]
    assert scopes(make_plan(reordered)) == scopes(plan)


@pytest.mark.parametrize(
    "change",
    [
        {"epsilon": 1.5},
        {"delta": 1e-6},
        {"domain": ["TX", "CA", "NY", "WA"]},
        {"name": "region"},
        {"memoize_by": "ts"},
    ],
)
def test_changed_release_parameters_start_a_new_memo(
    plan: RecordPlan, change: dict[str, Any]
) -> None:
    changed = make_plan([DEVICE, TS, {**STATE, **change}], epsilon=10.0)
    assert set(scopes(changed).values()).isdisjoint(scopes(plan).values())


def test_group_size_starts_a_new_memo(plan: RecordPlan) -> None:
    data = config_dict(FIELDS, epsilon=10.0, delta=1e-5)
    data["privacy"]["group_size"] = 2
    grouped = build_plan(parse_config(data))
    assert set(scopes(grouped).values()).isdisjoint(scopes(plan).values())


def test_memo_tokens_are_canonical_and_typed() -> None:
    # token = len(identity) as u32 LE || identity || canonical JSON of the true value;
    # a field identity is the memo value's canonical JSON, so "1" and 1 differ
    memo = MemoPlan(field="device", scope=b"s", domain=("TX", 1))
    identity = field_identity("dev-1")
    assert identity == b'"dev-1"'
    assert memo.token(identity, 0) == b"\x07\x00\x00\x00" + b'"dev-1"' + b'"TX"'
    assert memo.token(field_identity(1), 1) == b"\x01\x00\x00\x001" + b"1"
    assert memo.token(field_identity("1"), 1) != memo.token(field_identity(1), 1)
    assert field_identity("\ud800") == b'"\\ud800"'  # a lone surrogate, escaped
    assert MemoPlan.identity_of(memo.token(identity, 0)) == identity
    assert canonical_json({"b": 1, "a": "é"}) == b'{"a":"\\u00e9","b":1}'


# --- the pipeline: same (device, value), same answer --------------------------------------


def test_same_device_and_value_give_the_same_answer_everywhere(plan: RecordPlan) -> None:
    devices = [f"dev-{i}" for i in range(60)]
    messages = [
        record(d, state=["TX", "CA", "NY"][i % 3], flag=i % 2 == 0, city=f"c{i % 4}")
        for i, d in enumerate(devices)
    ]
    first = release(plan, messages)
    # again: other partition and offsets, reversed order, cut into batches, among others
    again: dict[int, Any] = {}
    order = list(reversed(range(60)))
    for lo in range(0, 60, 7):
        chunk = order[lo : lo + 7]
        batch = [b'{"broken', record("someone-else")] + [messages[i] for i in chunk]
        result = release(plan, batch, partition=5, first_offset=10_000 + 100 * lo)
        assert [d.index for d in result.dead_letters] == [0]
        for out_index, out in zip(result.output_index[1:], result.outputs[1:], strict=True):
            again[chunk[out_index - 2]] = json.loads(out)
    assert len(again) == 60
    firsts = [json.loads(out) for out in first.outputs]
    for i in range(60):
        for name in MEMOIZED:
            assert again[i][name] == firsts[i][name]
    # the salary is not memoized: keyed by offset, so a new release (equal with
    # probability < 1e-3 per record at t = 1250 grid steps; < 5 of 60 fails w.p. < 1e-9)
    assert sum(again[i]["salary"] == firsts[i]["salary"] for i in range(60)) < 5


def test_fresh_with_the_memo_key_gives_the_same_answers(plan: RecordPlan) -> None:
    messages = [record(f"dev-{i}", state="CA") for i in range(50)]
    keyed = release(plan, messages)
    memo_key = derive_memo_key(SECRET, TOPIC.encode(), b"")
    fresh = process_batch(plan, messages, Fresh(SeededSource(3), memo_key=memo_key))
    for name in MEMOIZED:
        assert column(fresh, name) == column(keyed, name)


def test_memo_answers_are_bound_to_the_topic_and_domain() -> None:
    # red team: with one memo key for every topic, a staging topic with forgeable message
    # keys answered probes about the devices of the authenticated topic
    keys = {
        NoiseKeys(SECRET, TOPIC).memo,
        NoiseKeys(SECRET, "staging.raw").memo,
        NoiseKeys(SECRET, TOPIC, "cluster-b").memo,
    }
    assert len(keys) == 3


def test_other_secret_gives_independent_answers(plan: RecordPlan) -> None:
    # OLH seeds are 64-bit words: equal across secrets with probability 2**-64 per record
    messages = [record(f"dev-{i}") for i in range(50)]
    a = column(release(plan, messages), "city")
    b = column(release(plan, messages, secret=OTHER_SECRET), "city")
    assert all(x["seed"] != y["seed"] for x, y in zip(a, b, strict=True))


def test_unknown_as_memoizes_the_mapped_domain_value(plan: RecordPlan) -> None:
    # "ZZ" is released as NY (unknown_as): the same memo as a true NY
    messages = [record(f"dev-{i}", state="ZZ") for i in range(40)]
    messages += [record(f"dev-{i}", state="NY") for i in range(40)]
    states = column(release(plan, messages), "state")
    assert states[:40] == states[40:]


def test_string_and_integer_device_ids_are_distinct_memos(plan: RecordPlan) -> None:
    # OLH seeds differ between device 7 and "7" unless the memo tokens coincide
    messages = [record(i) for i in range(30)] + [record(str(i)) for i in range(30)]
    cities = column(release(plan, messages), "city")
    assert all(a["seed"] != b["seed"] for a, b in zip(cities[:30], cities[30:], strict=True))
    big = release(plan, [record(10**30), record(-5)])
    assert big.dead_letters == []


def test_domain_reorder_keeps_every_answer(plan: RecordPlan) -> None:
    reordered = make_plan([{**STATE, "domain": ["NY", "CA", "TX"]}, FLAG, CITY, SALARY, TS, DEVICE])
    messages = [record(f"dev-{i}", state=["TX", "CA", "NY"][i % 3]) for i in range(90)]
    for name in MEMOIZED:
        assert column(release(reordered, messages), name) == column(release(plan, messages), name)


# --- distributions ------------------------------------------------------------------------

N_DEVICES = 20_000


@pytest.fixture(scope="module")
def many_devices(plan: RecordPlan) -> BatchResult:
    """One report (TX, true, "Ljubljana") from each of N_DEVICES distinct devices."""
    return release(plan, [record(f"device-{i:05d}") for i in range(N_DEVICES)])


def test_categorical_answers_follow_randomized_response(many_devices: BatchResult) -> None:
    # m = 2, eps = 1: P(TX) = 1 - 2p, P(CA) = P(NY) = p; 3 checks, false failure < 2e-6
    p = rr_p(2, 1.0, 0.0)
    states = column(many_devices, "state")
    assert within(states.count("TX"), N_DEVICES, 1 - 2 * p)
    assert within(states.count("CA"), N_DEVICES, p)
    assert within(states.count("NY"), N_DEVICES, p)


def test_boolean_answers_follow_randomized_response(many_devices: BatchResult) -> None:
    # m = 1, eps = 0.5: P(true) = 1 - p; false failure < 6e-7
    flags = column(many_devices, "flag")
    assert within(flags.count(True), N_DEVICES, 1 - rr_p(1, 0.5, 0.0))


def test_local_hashing_answers_follow_olh(plan: RecordPlan, many_devices: BatchResult) -> None:
    # truthful bucket with probability p = e^eps / (e^eps + g - 1), g = 8 at eps = 2;
    # seeds are distinct 64-bit words; false failure < 6e-7
    g = 8
    p = math.exp(2.0) / (math.exp(2.0) + g - 1)
    cities = column(many_devices, "city")
    seeds = np.array([c["seed"] for c in cities], dtype=np.uint64)
    buckets = np.array([c["bucket"] for c in cities], dtype=np.uint64)
    truthful = hash_to_bucket(seeds, value_digests(["Ljubljana"]), g) == buckets
    assert within(int(truthful.sum()), N_DEVICES, p)
    assert len(set(seeds.tolist())) == N_DEVICES


def agreement(a: list[Any], b: list[Any]) -> int:
    return sum(x == y for x, y in zip(a, b, strict=True))


def test_different_devices_answer_independently(
    plan: RecordPlan, many_devices: BatchResult
) -> None:
    # two independent RR answers for TX agree w.p. (1 - 2p)^2 + 2 p^2; shared words
    # would make them always agree; false failure < 6e-7
    n = 5_000
    others = column(release(plan, [record(f"device-{i:05d}/b") for i in range(n)]), "state")
    p = rr_p(2, 1.0, 0.0)
    assert within(
        agreement(column(many_devices, "state")[:n], others), n, (1 - 2 * p) ** 2 + 2 * p**2
    )


def test_different_values_of_one_device_answer_independently(
    plan: RecordPlan, many_devices: BatchResult
) -> None:
    # RR(TX) and RR(CA), independent: agree w.p. 2 (1 - 2p) p + p^2; false failure < 6e-7
    n = 5_000
    ca = column(release(plan, [record(f"device-{i:05d}", state="CA") for i in range(n)]), "state")
    p = rr_p(2, 1.0, 0.0)
    assert within(agreement(column(many_devices, "state")[:n], ca), n, 2 * (1 - 2 * p) * p + p**2)


def test_new_epsilon_gives_independent_not_coupled_answers(many_devices: BatchResult) -> None:
    # reusing the words at eps 1.5 would agree w.p. ~0.88 (and leak: "flipped at eps 1,
    # kept at 1.5" names the value); independent answers agree w.p.
    # k1 k2 + 2 p1 p2 ~ 0.46; false failure < 6e-7
    n = 5_000
    changed = make_plan([DEVICE, TS, SALARY, {**STATE, "epsilon": 1.5}, FLAG, CITY])
    states = column(release(changed, [record(f"device-{i:05d}") for i in range(n)]), "state")
    p1, p2 = rr_p(2, 1.0, 0.0), rr_p(2, 1.5, 0.0)
    expected = (1 - 2 * p1) * (1 - 2 * p2) + 2 * p1 * p2
    assert within(agreement(column(many_devices, "state")[:n], states), n, expected)


# --- dead letters and the output ------------------------------------------------------------


def only_dead(plan: RecordPlan, raw: bytes) -> tuple[str, str]:
    result = release(plan, [raw, record("fine")])
    assert result.output_index == [1]
    assert len(result.dead_letters) == 1
    dead = result.dead_letters[0]
    return dead.reason, dead.detail


def test_missing_memo_field_is_dead_lettered(plan: RecordPlan) -> None:
    raw = json.dumps({"ts": 1, "salary": 1.0, "state": "TX", "flag": True, "city": "x"})
    reason, detail = only_dead(plan, raw.encode())
    assert reason == "missing_field"
    assert detail == "field 'device' (memoize_by of 'state'): missing"


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (12345.678, "number"),
        (True, "boolean"),
        (None, "null"),
        (["CANARY-7"], "array"),
        ({"id": "CANARY-7"}, "object"),
    ],
)
def test_memo_field_of_wrong_type_is_dead_lettered(plan: RecordPlan, value: Any, kind: str) -> None:
    reason, detail = only_dead(plan, record(value))
    assert reason == "wrong_type"
    assert detail == (
        f"field 'device' (memoize_by of 'state'): expected a string or an integer, got {kind}"
    )
    assert "CANARY" not in detail
    assert "12345" not in detail


def test_dropped_memo_field_never_reaches_the_output(plan: RecordPlan) -> None:
    messages = [record(f"dev-CANARY-{i}") for i in range(20)] + [record(424242)]
    result = release(plan, messages)
    assert result.dead_letters == []
    for out in result.outputs:
        assert list(json.loads(out)) == RELEASED
        assert b"CANARY" not in out
        assert b"424242" not in out


# --- providers ------------------------------------------------------------------------------


def test_fresh_without_key_draws_fresh_noise(plan: RecordPlan) -> None:
    # 300 reports of one (device, value): all TX answers equal w.p. < 0.58^300
    result = process_batch(plan, [record("dev")] * 300, SeededSource(11))
    assert len(set(column(result, "state"))) > 1
    assert len({c["seed"] for c in column(result, "city")}) == 300


# --- the docs (protection page) -----------------------------------------------------------


def test_readme_memoize_example_is_valid() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", PROTECTION_PAGE.read_text(encoding="utf-8"), re.S)
    examples = [b for b in blocks if b.startswith("fields:") and "memo_identity" in b]
    assert len(examples) == 1
    fields = yaml.safe_load(examples[0])["fields"]
    plan = build_plan(parse_config(config_dict(fields)))
    assert any(f.memo is not None for f in plan.fields)


def test_local_hashing_seed_is_a_function_of_the_device_only(plan: RecordPlan) -> None:
    # the seed is the device's alone (a seed of (device, value) named the value to a prober);
    # what a change of value shows is in the bucket: README, "not protected"
    before = column(release(plan, [record(f"d{i}", city="Maribor") for i in range(50)]), "city")
    after = column(release(plan, [record(f"d{i}", city="Koper") for i in range(50)]), "city")
    assert all(a["seed"] == b["seed"] for a, b in zip(before, after, strict=True))
    assert len({a["seed"] for a in before}) == 50

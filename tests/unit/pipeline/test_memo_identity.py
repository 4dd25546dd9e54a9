"""Memoization bound to an identity writers cannot forge (issue 13, item 1).

A memoized answer is a fixed function of (noise key, field scope, identity,
true value). With the identity read from a record field, any writer could
forge a victim's id and query the victim's answer for every candidate
value. Here the identity is the Kafka message key (``memo_identity:
message_key``), which the collector sets from an authenticated session; a
record field is refused unless ``memo_identity_trusted: true``.

The PRF is keyed BLAKE2b under a fixed test secret, so every test is
deterministic; the stated false-failure probabilities treat the PRF as a
random function (the probability that a random key would fail).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from privstream.cli.main import main
from privstream.config import parse_config
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.mechanisms.rng import MemoSource, NoiseKeys, SplicedSource, derive_memo_key
from privstream.pipeline import BatchResult, RecordPlan, process_batch
from privstream.pipeline.noise import Fresh, Replayable
from privstream.pipeline.plan import MemoPlan, field_identity
from privstream.pipeline.reference import process_batch_reference
from privstream.testing import SeededSource

from tests.support.configs import config_dict

SECRET = bytes(range(32))
TOPIC = "raw"
DOMAIN = ["a", "b", "c", "d"]

DEVICE: dict[str, Any] = {"name": "device", "kind": "drop"}
TAG: dict[str, Any] = {"name": "tag", "kind": "public"}
OS: dict[str, Any] = {
    "name": "os",
    "kind": "categorical",
    "domain": DOMAIN,
    "epsilon": 1.0,
    "memo_identity": "message_key",
}
FLAG: dict[str, Any] = {
    "name": "flag",
    "kind": "boolean",
    "epsilon": 1.0,
    "memo_identity": "message_key",
}
URL: dict[str, Any] = {
    "name": "url",
    "kind": "categorical",
    "mechanism": "local_hashing",
    "epsilon": 2.0,
    "memo_identity": "message_key",
}
FIELDS = [DEVICE, TAG, OS, FLAG, URL]


def make_plan(fields: list[dict[str, Any]] = FIELDS) -> RecordPlan:
    return build_plan(parse_config(config_dict(fields, epsilon=10.0)))


def record(device: str, tag: int, os: str = "a", flag: bool = True, url: str = "x.org") -> bytes:
    return json.dumps({"device": device, "tag": tag, "os": os, "flag": flag, "url": url}).encode()


def release(
    plan: RecordPlan, messages: list[bytes], keys: list[bytes | None], first_offset: int = 0
) -> BatchResult:
    n = len(messages)
    noise = Replayable(
        NoiseKeys(SECRET, TOPIC),
        np.zeros(n, dtype=np.int64),
        np.arange(first_offset, first_offset + n, dtype=np.int64),
        messages,
    )
    return process_batch(plan, messages, noise, keys)


def outputs(result: BatchResult) -> dict[int, dict[str, Any]]:
    """Sanitized records by input index."""
    return {i: json.loads(raw) for i, raw in zip(result.output_index, result.outputs, strict=True)}


# --- config: a record field is no identity unless the operator vouches for it ----------


def test_memoize_by_a_record_field_is_refused_without_the_trusted_opt_in() -> None:
    fields = [DEVICE, {**OS, "memo_identity": None, "memoize_by": "device"}]
    with pytest.raises(ConfigError) as info:
        parse_config(config_dict(fields))
    (problem,) = info.value.problems
    assert problem.startswith("fields[1] (os).memoize_by: ")
    assert "memo_identity: message_key" in problem
    assert "memo_identity_trusted: true" in problem
    assert "candidate values" in problem  # says what the forgery exposes


def test_trusted_field_identity_is_accepted_and_planned_as_forgeable() -> None:
    fields = [DEVICE, {**OS, "memo_identity": None, "memoize_by": "device"}]
    fields[1]["memo_identity_trusted"] = True
    (memo,) = [f.memo for f in make_plan(fields).fields]
    assert memo is not None and memo.field == "device" and not memo.by_key


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        ({"memoize_by": "device", "memo_identity_trusted": True}, "memoize_by"),
        ({"memo_identity": None, "memo_identity_trusted": True}, "memo_identity_trusted"),
    ],
)
def test_memo_options_that_contradict_each_other_are_refused(
    extra: dict[str, Any], option: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(config_dict([DEVICE, {**OS, **extra}]))
    (problem,) = info.value.problems
    assert problem.startswith(f"fields[1] (os).{option}: ")


# --- tokens, scopes and the seed ---------------------------------------------------------


def test_token_is_prefix_free_and_gives_back_its_identity() -> None:
    memo = MemoPlan(field=None, scope=b"s", domain=None)
    a, b = memo.token(b"ab", "c"), memo.token(b"a", "bc")
    assert a != b  # the identity is length-prefixed: no shifting of bytes between parts
    assert MemoPlan.identity_of(a) == b"ab" and MemoPlan.identity_of(b) == b"a"
    assert memo.token(b"", "x") != memo.token(b"\x00", "x")


def test_field_identity_tells_string_and_integer_ids_apart() -> None:
    assert field_identity("7") != field_identity(7)


def test_every_memo_scope_is_distinct() -> None:
    plan = make_plan()
    memos = [f.memo for f in plan.fields if f.memo]
    scopes = [m.scope for m in memos] + [m.seed_scope for m in memos]
    assert len(set(scopes)) == len(scopes) == 6
    words = {f.name: f.memo.identity_words for f in plan.fields if f.memo}
    assert words == {"os": 0, "flag": 0, "url": 1}  # word 0 of OLH is its hash seed


def test_spliced_source_reads_each_word_from_one_stream() -> None:
    key = derive_memo_key(SECRET)
    head = MemoSource(key, b"head", [b"x", b"y", b"z"])
    tail = MemoSource(key, b"tail", [b"x", b"y", b"z"])
    spliced = SplicedSource(head, 2, tail)
    words = spliced.words(3, 12)
    assert np.array_equal(words[:, :2], head.words(3, 2))
    assert np.array_equal(words[:, 2:], tail.words(3, 12)[:, 2:])
    rows = np.array([2, 0], dtype=np.int64)
    for start, k in [(0, 1), (1, 3), (2, 5), (7, 4)]:
        assert np.array_equal(spliced.more_words(rows, start, k), words[rows, start : start + k])


# --- memoization by the message key -----------------------------------------------------


def test_same_key_same_value_gives_the_same_answer_anywhere_in_the_stream() -> None:
    plan = make_plan()
    raw = record("ignored", 0)
    first = outputs(release(plan, [raw], [b"dev-1"], first_offset=0))[0]
    again = outputs(release(plan, [record("other-device-field", 0)], [b"dev-1"], 9_000))[0]
    assert {k: first[k] for k in ("os", "flag", "url")} == {
        k: again[k] for k in ("os", "flag", "url")
    }


def test_local_hashing_seed_depends_on_the_device_alone() -> None:
    plan = make_plan()
    urls = [f"https://example.org/{i}" for i in range(50)]
    messages = [record("d", i, url=url) for i, url in enumerate(urls)]
    same_device = outputs(release(plan, messages, [b"dev-1"] * 50))
    seeds = {out["url"]["seed"] for out in same_device.values()}
    assert len(seeds) == 1  # a change of value never shows in the seed
    other = outputs(release(plan, messages, [f"dev-{i}".encode() for i in range(50)]))
    # distinct devices: distinct seeds (a collision among 50 64-bit words: < 2**-52)
    assert len({out["url"]["seed"] for out in other.values()}) == 50


def test_a_record_without_a_message_key_is_dead_lettered_by_both_paths() -> None:
    plan = make_plan()
    messages = [record("d", i) for i in range(4)]
    keys: list[bytes | None] = [b"k0", None, b"", b"k3"]
    for run in (process_batch, process_batch_reference):
        result = run(plan, messages, Fresh(SeededSource(1)), keys)
        assert result.output_index == [0, 3]
        assert [(d.index, d.reason) for d in result.dead_letters] == [
            (1, "missing_key"),
            (2, "missing_key"),
        ]
        assert "message key" in result.dead_letters[0].detail


def test_without_keys_at_all_key_memoized_fields_draw_fresh_noise() -> None:
    """File mode: no identity, so no memo; the same line twice gets independent answers.

    50 identical records of one device through a memo-keyed provider: memoized,
    all 50 OLH seeds would be one; fresh, they are 50 distinct words (a
    collision has probability < 2**-52).
    """
    plan = make_plan()
    messages = [record("d", 0)] * 50
    result = process_batch(plan, messages, Fresh(SeededSource(2), memo_key=derive_memo_key(SECRET)))
    assert len({out["url"]["seed"] for out in outputs(result).values()}) == 50


# --- the probing attacker ---------------------------------------------------------------


def rr_keep(epsilon: float, m: int) -> float:
    """Randomized response over m values keeps the truth w.p. e^eps / (e^eps + m - 1)."""
    return math.exp(epsilon) / (math.exp(epsilon) + m - 1)


def test_probes_with_a_forged_device_field_learn_nothing_beyond_one_answer() -> None:
    """The issue's attack, against the pipeline: it must recover nothing beyond chance.

    400 victims (keys ``victim-i``) report a uniformly random domain value.
    For each victim, the attacker writes one probe per candidate value that
    carries the victim's id *in the device field* under an attacker key of
    its own (one sybil key per victim), tagged through the public field.
    It keeps the candidates whose probe answer equals the victim's answer.
    Had the answer been keyed by the field (the old design), the truth
    would be among them for every victim, and one candidate would often be
    left. The probes' answers are independent of the victim's, so whatever
    the attacker computes, it guesses the value at most as well as from the
    victim's one answer: with probability ``p = e / (e + 3)`` (0.475).
    Bounds: ``p + 5 sd`` over 400 victims (one-sided normal tail 2.9e-7 each).
    The OLH field: a probe's seed never equals its victim's (else it would
    pin the value): probability of a failure 400 * 4 * 2**-64.
    """
    rng = np.random.default_rng(13)
    victims = 400
    truth = rng.integers(0, len(DOMAIN), size=victims)
    urls = [f"https://example.org/{v}" for v in truth]
    messages: list[bytes] = []
    keys: list[bytes | None] = []
    for i in range(victims):
        messages.append(record(f"victim-{i}", i, os=DOMAIN[truth[i]], url=urls[i]))
        keys.append(f"victim-{i}".encode())
    for i in range(victims):
        for c, value in enumerate(DOMAIN):
            tag = victims + i * len(DOMAIN) + c
            messages.append(record(f"victim-{i}", tag, os=value, url=f"https://example.org/{c}"))
            keys.append(f"attacker-{i}".encode())
    out = outputs(release(make_plan(), messages, keys))
    assert len(out) == len(messages)
    by_tag = {o["tag"]: o for o in out.values()}
    in_set = hits = 0
    for i in range(victims):
        answer = by_tag[i]["os"]
        probes = [by_tag[victims + i * len(DOMAIN) + c] for c in range(len(DOMAIN))]
        consistent = [c for c, probe in enumerate(probes) if probe["os"] == answer]
        in_set += int(truth[i] in consistent)
        guess = int(rng.choice(consistent)) if consistent else DOMAIN.index(answer)
        hits += int(guess == truth[i])
        assert all(p["url"]["seed"] != by_tag[i]["url"]["seed"] for p in probes)
    p = rr_keep(1.0, len(DOMAIN))
    bound = victims * p + 5 * math.sqrt(victims * p * (1 - p))
    assert in_set <= bound, f"the truth survived the probes for {in_set} of {victims} victims"
    assert hits <= bound, f"the attacker guessed {hits} of {victims} values"


# --- explain names what stays forgeable -------------------------------------------------

MEMO_CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 3}
fields:
  - {name: device, kind: drop}
  - {name: country, kind: categorical, domain: [DE, FR], epsilon: 1, memo_identity: message_key}
  - {name: lang, kind: categorical, domain: [de, fr], epsilon: 1, memoize_by: device,
     memo_identity_trusted: true}
  - {name: crashed, kind: boolean, epsilon: 1}
"""


def test_explain_names_the_trusted_key_and_the_forgeable_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "memo.yaml"
    path.write_text(MEMO_CONFIG)
    assert main(["explain", "--config", str(path), "--format", "json"]) == 0
    fields = {f["name"]: f for f in json.loads(capsys.readouterr().out)["fields"]}
    assert fields["country"]["memo_identity"] == "message_key"
    assert fields["country"]["memo_forgeable"] is False
    assert fields["lang"]["memo_identity"] == "field"
    assert fields["lang"]["memoize_by"] == "device"
    assert fields["lang"]["memo_forgeable"] is True
    assert fields["crashed"]["memo_identity"] is None
    assert main(["explain", "--config", str(path)]) == 0
    table = capsys.readouterr().out
    assert "memoized by the Kafka message key: country; this trusts the key" in table
    assert "FORGEABLE memo identity: lang (by device); any writer" in table


@pytest.mark.parametrize("trusted_field", [False, True])
def test_fast_path_and_reference_agree_on_memoized_fields(trusted_field: bool) -> None:
    """Same bytes, positions and reasons with keys, missing keys and odd identities."""
    fields = FIELDS
    if trusted_field:
        fields = [
            DEVICE,
            TAG,
            *(
                {**f, "memo_identity": None, "memoize_by": "device", "memo_identity_trusted": True}
                for f in (OS, FLAG, URL)
            ),
        ]
    plan = make_plan(fields)
    rng = np.random.default_rng(5)
    messages = [
        record(f"d{rng.integers(0, 20)}", i, os=DOMAIN[i % 4], url=f"u{i % 7}") for i in range(300)
    ]
    messages += [b'{"tag": 1, "os": "a", "flag": true, "url": "x"}', b'{"device": 7, "tag": 2}']
    messages += [json.dumps({"device": 7, "tag": 3, "os": "b", "flag": False, "url": "y"}).encode()]
    keys: list[bytes | None] = [
        None if i % 50 == 0 else b"" if i % 77 == 0 else f"k{i % 13}".encode()
        for i in range(len(messages))
    ]
    fast = release(plan, messages, keys)
    n = len(messages)
    ref_noise = Replayable(
        NoiseKeys(SECRET, TOPIC),
        np.zeros(n, dtype=np.int64),
        np.arange(n, dtype=np.int64),
        messages,
    )
    ref = process_batch_reference(plan, messages, ref_noise, keys)
    assert fast.outputs == ref.outputs
    assert fast.output_index == ref.output_index
    assert fast.dead_letters == ref.dead_letters
    assert len(fast.outputs) > 200 and fast.dead_letters

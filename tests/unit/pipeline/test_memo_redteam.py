"""Red team (issue 29, item 1): a memo identity taken from a noised field gives it away.

The attack: ``diag`` is released by randomized response at epsilon 0.5 and
``app`` by local hashing memoized by ``diag``. The local-hashing seed is a
function of the memo identity alone, so the released seeds fall into one
group per raw ``diag`` value; a majority vote of the released ``diag``
answers inside each group names the raw value of every record in it. On the
main of 2026-11-27 this recovered 2,000 of 2,000 values.

A memo identity may now only be the message key, a ``drop`` or a ``public``
field. Each config below is either refused at load, or the attack run on
2,000 records of 2,000 devices stays under the bound no attacker can beat
against the record's epsilon (1.5 in all): with a uniform prior over the
k = 5 values, the best guess is right with probability at most
e^1.5 / (e^1.5 + 4) = 0.528. The expected accuracy of the vote on an allowed
config is e^0.5 / (e^0.5 + 4) = 0.292 (groups of one record), so over 2,000
records the assertion sits more than 20 standard deviations away; the noise
is keyed under a fixed secret, so the run is deterministic, and its
false-failure probability under a random key is below 1e-80.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pytest
from privstream.config import parse_config
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import process_batch
from privstream.pipeline.noise import Replayable

from tests.support.configs import config_dict

SECRET = bytes(range(32))
VALUES = "abcde"
N = 2_000
DIAG: dict[str, Any] = {
    "name": "diag",
    "kind": "categorical",
    "domain": list(VALUES),
    "mechanism": "randomized_response",
    "epsilon": 0.5,
}
#: the best guess of a uniform 5-valued secret from an epsilon = 1.5 record
BOUND = math.exp(1.5) / (math.exp(1.5) + len(VALUES) - 1)


def memoized(by: dict[str, Any], mechanism: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "app", "kind": "categorical", "epsilon": 1.0}
    if mechanism == "local_hashing":
        spec["mechanism"] = "local_hashing"
    else:
        spec |= {"mechanism": mechanism, "domain": ["x", "y"]}
    return spec | by


CONFIGS = {
    "lh by noised diag": memoized(
        {"memoize_by": "diag", "memo_identity_trusted": True}, "local_hashing"
    ),
    "rr by noised diag": memoized(
        {"memoize_by": "diag", "memo_identity_trusted": True}, "randomized_response"
    ),
    "lh by drop device": memoized(
        {"memoize_by": "device", "memo_identity_trusted": True}, "local_hashing"
    ),
    "lh by message key": memoized({"memo_identity": "message_key"}, "local_hashing"),
}


def release(app: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The sanitized records of 2,000 devices, and their raw ``diag`` values."""
    plan = build_plan(parse_config(config_dict([{"name": "device", "kind": "drop"}, DIAG, app])))
    raw = [VALUES[i % len(VALUES)] for i in range(N)]
    messages = [
        json.dumps({"device": f"d{i}", "diag": raw[i], "app": "x"}).encode() for i in range(N)
    ]
    keys = [f"d{i}".encode() for i in range(N)]
    noise = Replayable(
        NoiseKeys(SECRET, "raw"),
        np.zeros(N, dtype=np.int64),
        np.arange(N, dtype=np.int64),
        messages,
    )
    result = process_batch(plan, messages, noise, keys)
    assert not result.dead_letters
    return [json.loads(out) for out in result.outputs], raw


def vote_accuracy(outputs: list[dict[str, Any]], raw: list[str]) -> float:
    """Group the records by their released ``app`` answer, majority-vote ``diag`` in each."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, out in enumerate(outputs):
        groups[json.dumps(out["app"], sort_keys=True)].append(i)
    right = 0
    for members in groups.values():
        guess = Counter(outputs[i]["diag"] for i in members).most_common(1)[0][0]
        right += sum(raw[i] == guess for i in members)
    return right / len(raw)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_memo_groups_never_recover_a_noised_value(name: str) -> None:
    try:
        outputs, raw = release(CONFIGS[name])
    except ConfigError as refused:
        (problem,) = refused.problems
        assert "which is released with noise" in problem
        return
    assert vote_accuracy(outputs, raw) < BOUND


@pytest.mark.parametrize("name", ["lh by noised diag", "rr by noised diag"])
def test_memoize_by_a_noised_field_is_refused_at_load(name: str) -> None:
    with pytest.raises(ConfigError) as refused:
        release(CONFIGS[name])
    (problem,) = refused.value.problems
    assert problem.startswith("fields[2] (app).memoize_by: field 'diag' is of kind categorical")

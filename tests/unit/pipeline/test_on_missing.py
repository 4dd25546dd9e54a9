"""Absent and null values of noised fields: ``on_missing`` (issue 32, item 2).

For every noised kind and every ``on_missing`` mode, a record's release
decision and its output shape must not depend on the field's value:
present in range, out of range, null or absent. ``dead_letter`` (the
default) dead-letters the last two whatever the kind; ``impute`` releases
all four with the same shape; ``null`` releases all four, null exactly
where the value was absent or null (presence is public). The fast path
must give the reference's very bytes.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from privstream.config import parse_config
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import RecordPlan, process_batch
from privstream.pipeline.noise import Replayable
from privstream.pipeline.reference import process_batch_reference

from tests.unit._support import config_dict

SECRET = bytes(range(100, 132))

#: (field entry without name and on_missing, in-domain impute, in range, out of range)
KINDS: dict[str, tuple[dict[str, Any], Any, Any, Any]] = {
    "real": ({"kind": "real", "bounds": [0, 10], "epsilon": 1.0}, 5.0, 2.5, 1e999),
    "real_piecewise": (
        {"kind": "real", "bounds": [0, 10], "epsilon": 1.0, "mechanism": "piecewise"},
        0,
        7,
        -40,
    ),
    "integer": ({"kind": "integer", "bounds": [0, 10], "epsilon": 1.0}, 3, 4, 10**30),
    "categorical": (
        {"kind": "categorical", "domain": [1, 2, 3], "epsilon": 1.0, "unknown_as": 2},
        3,
        1,
        77,
    ),
    "categorical_unary": (
        {
            "kind": "categorical",
            "domain": ["a", "b", "c"],
            "epsilon": 1.0,
            "mechanism": "unary_encoding",
            "unknown_as": "c",
        },
        "a",
        "b",
        "q",
    ),
    "categorical_hashed": (
        {"kind": "categorical", "epsilon": 1.0, "mechanism": "local_hashing"},
        "none",
        "x",
        "an unseen string",
    ),
    "boolean": ({"kind": "boolean", "epsilon": 1.0}, False, True, True),
    "set": (
        {
            "kind": "set",
            "universe": ["p", "q", "r"],
            "max_items": 2,
            "epsilon": 1.0,
            "on_unknown": "drop",
            "on_too_many": "truncate",
        },
        [],
        ["p"],
        ["p", "q", "r", "zz"],
    ),
    "vector": (
        {"kind": "vector", "dimension": 3, "l2_bound": 1.0, "epsilon": 1.0, "delta": 1e-6},
        [0, 0, 0],
        [0.1, 0.2, 0.3],
        [100, -100, 1e999],
    ),
    "functional": (
        {
            "kind": "functional",
            "grid": [0.0, 0.5, 1.0],
            "bandwidth": 0.5,
            "rkhs_radius": 1.0,
            "epsilon": 1.0,
            "delta": 1e-6,
        },
        [0, 0, 0],
        [0.1, 0.0, -0.1],
        [50, 50, 50],
    ),
}
MODES = ("dead_letter", "impute", "null")


def plan_of(kind: str, mode: str) -> RecordPlan:
    entry, impute, _, _ = KINDS[kind]
    field = {"name": "f", **entry, "on_missing": mode}
    if mode == "impute":
        field["impute"] = impute
    fields = [{"name": "seq", "kind": "public"}, field]
    return build_plan(parse_config(config_dict(fields, epsilon=2.0, delta=1e-5)))


def messages_of(kind: str) -> list[bytes]:
    """Each value case twice, interleaved: in range, out of range, null, absent."""
    _, _, inside, outside = KINDS[kind]
    values = [json.dumps(inside), json.dumps(outside).replace("Infinity", "1e999"), "null", None]
    texts = [
        f'{{"seq":{i}}}' if value is None else f'{{"seq":{i},"f":{value}}}'
        for i, value in enumerate(values * 2)
    ]
    return [text.encode() for text in texts]


def noise(messages: list[bytes]) -> Replayable:
    n = len(messages)
    offsets = np.arange(n, dtype=np.int64)
    return Replayable(NoiseKeys(SECRET, "raw"), np.zeros(n, dtype=np.int64), offsets, messages)


def shape(value: Any) -> Any:
    """The JSON shape of a released value: its type, and the shape of what it holds."""
    if isinstance(value, list):
        return ("array", len(value) if value and not isinstance(value[0], str) else "strings")
    if isinstance(value, dict):
        return ("object", tuple(sorted(value)))
    return type(value).__name__


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_release_decision_and_shape_do_not_depend_on_the_value(kind: str, mode: str) -> None:
    plan = plan_of(kind, mode)
    messages = messages_of(kind)
    fast = process_batch(plan, messages, noise(messages))
    reference = process_batch_reference(plan, messages, noise(messages))
    assert (fast.outputs, fast.output_index, fast.dead_letters) == (
        reference.outputs,
        reference.output_index,
        reference.dead_letters,
    )
    absent = [2, 3, 6, 7]  # null and absent, twice
    if mode == "dead_letter":
        assert [d.index for d in fast.dead_letters] == absent
        assert {d.reason for d in fast.dead_letters} <= {"missing_field", "wrong_type"}
        return
    assert fast.dead_letters == []
    assert fast.output_index == list(range(8))
    released = [json.loads(text)["f"] for text in fast.outputs]
    if mode == "impute":
        # the set's shape is an array of strings, which may be empty: its type only
        shapes = {shape(v) if kind != "set" else type(v).__name__ for v in released}
        assert len(shapes) == 1, shapes
    else:
        assert [i for i, v in enumerate(released) if v is None] == absent
        present = {
            shape(v) if kind != "set" else type(v).__name__ for v in released if v is not None
        }
        assert len(present) == 1, present


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_impute_value_outside_the_domain_is_refused(kind: str) -> None:
    entry, _, _, outside = KINDS[kind]
    bad = {"set": ["zz"], "vector": [5, 5, 5], "functional": [1]}.get(kind, outside)
    if kind in ("categorical_hashed", "boolean"):
        bad = 7  # no string; no boolean
    field = {"name": "f", **entry, "on_missing": "impute", "impute": bad}
    with pytest.raises(ConfigError, match="impute"):
        parse_config(config_dict([field], epsilon=2.0, delta=1e-5))

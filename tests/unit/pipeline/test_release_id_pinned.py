"""The release id of existing configs, recomputed from its documented definition.

A field's release id keys its noise (``NoiseKeys.field``): if the way it is
computed changed, every field of every deployed config would be released
again with independent noise. docs/operations.md and
``privstream.pipeline.plan.release_id`` define it as

    SHA-256 of canonical JSON (sorted keys, no spaces, ASCII) of
    {"v": 2, "spec": <the field's whole config entry, defaults filled in>,
     "share": [epsilon, delta] or null, "mechanism": <class name> or null,
     "params": <the mechanism's calibrated parameters> or null}

These tests write the spec entries by hand (defaults included) and hash
with the stdlib, so a refactor of the plan, the registry or the config
models that changes any byte of the description fails here.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
from privstream.config import parse_config
from privstream.kinds import build_plan

from tests.support.configs import KAFKA

MEMO_DEFAULTS = {"memo_identity": None, "memoize_by": None, "memo_identity_trusted": False}

#: (config entry as written, the entry with every default filled in)
ENTRIES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (
        {"name": "t", "kind": "public"},
        {"name": "t", "kind": "public", "allow_nested": False},
    ),
    (
        # explicit since real fields default to auto (which picks hybrid here): same id as before
        {"name": "x", "kind": "real", "bounds": [0, 100], "epsilon": 1.0, "mechanism": "laplace"},
        {
            "name": "x",
            "kind": "real",
            "epsilon": 1.0,
            "delta": 0.0,
            "bounds": [0.0, 100.0],
            "mechanism": "laplace",
            "calibration": "tight",
        },
    ),
    (
        {"name": "n", "kind": "integer", "bounds": [0, 10], "epsilon": 0.5},
        {
            "name": "n",
            "kind": "integer",
            "epsilon": 0.5,
            "delta": 0.0,
            "bounds": [0.0, 10.0],
            "mechanism": "discrete_laplace",
        },
    ),
    (
        {"name": "c", "kind": "categorical", "domain": ["b", "a", 3], "epsilon": 1.0},
        {
            "name": "c",
            "kind": "categorical",
            "epsilon": 1.0,
            "delta": 0.0,
            "domain": ["b", "a", 3],
            "mechanism": "randomized_response",
            "unknown_as": None,
            **MEMO_DEFAULTS,
        },
    ),
    (
        {"name": "b", "kind": "boolean", "epsilon": 0.75},
        {
            "name": "b",
            "kind": "boolean",
            "epsilon": 0.75,
            "delta": 0.0,
            "mechanism": "randomized_response",
            **MEMO_DEFAULTS,
        },
    ),
    (
        {"name": "s", "kind": "set", "universe": ["p", "q", "r"], "max_items": 2, "epsilon": 1.0},
        {
            "name": "s",
            "kind": "set",
            "epsilon": 1.0,
            "delta": 0.0,
            "universe": ["p", "q", "r"],
            "max_items": 2,
            "mechanism": "unary_encoding",
            "variant": "optimized",
            "on_unknown": "dead_letter",
            "on_too_many": "dead_letter",
        },
    ),
]

CLASS_NAMES = {
    "public": None,
    "real": "LaplaceMechanism",
    "integer": "IntegerLaplaceMechanism",
    "categorical": "RandomizedResponse",
    "boolean": "RandomizedResponse",
    "set": "UnaryEncoding",
}


def documented_id(
    spec: dict[str, Any], share: tuple[float, float] | None, params: dict[str, Any] | None
) -> bytes:
    description = {
        "v": 2,
        "spec": spec,
        "share": None if share is None else list(share),
        "mechanism": CLASS_NAMES[spec["kind"]],
        "params": params,
    }
    text = json.dumps(description, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).digest()


@pytest.mark.parametrize(("written", "full"), ENTRIES, ids=[e[0]["kind"] for e in ENTRIES])
def test_release_id_is_the_documented_digest(written: dict[str, Any], full: dict[str, Any]) -> None:
    config = parse_config({"kafka": dict(KAFKA), "privacy": {"epsilon": 10.0}, "fields": [written]})
    (planned,) = build_plan(config).fields
    mechanism = planned.handler.mechanism
    share = None if mechanism is None else (full["epsilon"], full["delta"])
    params = None if mechanism is None else mechanism.params()
    assert planned.release_id == documented_id(full, share, params)


def test_randomized_response_params_are_its_calibration() -> None:
    """The params hashed for randomized response are the textbook ones (m = 3, eps = 1)."""
    config = parse_config(
        {"kafka": dict(KAFKA), "privacy": {"epsilon": 10.0}, "fields": [ENTRIES[3][0]]}
    )
    (planned,) = build_plan(config).fields
    assert planned.handler.mechanism is not None
    params = planned.handler.mechanism.params()
    e = math.exp(1.0)
    assert params == {
        "p": pytest.approx(1 / (e + 2)),
        "keep_probability": pytest.approx(e / (e + 2)),
        "domain_size": 3,
    }


def test_release_id_does_not_depend_on_the_other_fields() -> None:
    """The same entry with the same share keeps its id next to other fields (noise stays)."""
    alone = parse_config(
        {"kafka": dict(KAFKA), "privacy": {"epsilon": 10.0}, "fields": [ENTRIES[1][0]]}
    )
    with_others = parse_config(
        {
            "kafka": dict(KAFKA),
            "privacy": {"epsilon": 10.0},
            "fields": [{"name": "d", "kind": "drop"}, ENTRIES[0][0], ENTRIES[1][0]],
        }
    )
    assert build_plan(alone).fields[0].release_id == build_plan(with_others).fields[-1].release_id

"""The field-kind registry: complete at start-up, one registration per kind and mechanism.

A kind the code cannot release, estimate and audit must fail when the
registry loads or the plan is built, naming the kind and the missing part;
never a silent fall-back (a field missing from ``estimate``, a fast path
that quietly falls back, a memo token built from domain positions).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from privstream.audit.by_kind import TARGETS, target_for
from privstream.config import parse_config
from privstream.config.fields import FIELD_KINDS, FIELD_MODELS, mechanisms_of
from privstream.errors import PrivstreamError, RegistryError
from privstream.estimate.accumulators import Options
from privstream.estimate.aggregate import accumulator_for
from privstream.estimate.by_kind import ESTIMATORS
from privstream.kinds import (
    AUTO,
    REGISTRY,
    build_plan,
    check_registry,
    check_table,
    registration_for,
    registration_of,
)
from privstream.kinds.auto import resolve_auto
from privstream.kinds.base import FieldKind

from tests.support.configs import config_dict

#: one field of every registered kind and mechanism (drop is never released)
EVERY_KIND: list[dict[str, Any]] = [
    {"name": "dev", "kind": "drop"},
    {"name": "t", "kind": "public"},
    {"name": "x", "kind": "real", "bounds": [0, 100], "epsilon": 1.0},
    {"name": "g", "kind": "real", "bounds": [0, 1], "epsilon": 1.0, "delta": 1e-6,
     "mechanism": "gaussian"},
    {"name": "pm", "kind": "real", "bounds": [0, 1], "epsilon": 1.0, "mechanism": "piecewise"},
    {"name": "hm", "kind": "real", "bounds": [0, 1], "epsilon": 1.0, "mechanism": "hybrid"},
    {"name": "du", "kind": "real", "bounds": [0, 1], "epsilon": 1.0, "mechanism": "duchi"},
    {"name": "ps", "kind": "real", "bounds": [0, 1], "epsilon": 1.0, "mechanism": "pm_sub"},
    {"name": "to", "kind": "real", "bounds": [0, 1], "epsilon": 1.0,
     "mechanism": "three_outputs"},
    {"name": "sw", "kind": "real", "bounds": [0, 1], "epsilon": 1.0, "target": "distribution"},
    {"name": "n", "kind": "integer", "bounds": [0, 10], "epsilon": 1.0},
    *({"name": f"n_{m}", "kind": "integer", "bounds": [0, 10], "epsilon": 1.0, "mechanism": m}
      for m in ("piecewise", "hybrid", "duchi", "pm_sub", "three_outputs")),
    {"name": "c", "kind": "categorical", "domain": ["b", "a", 3], "epsilon": 1.0},
    {"name": "h", "kind": "categorical", "mechanism": "local_hashing", "epsilon": 2.0},
    {"name": "o", "kind": "categorical", "mechanism": "exponential", "domain": ["lo", "mid", "hi"],
     "epsilon": 1.0},
    {"name": "u", "kind": "categorical", "mechanism": "unary_encoding", "domain": ["x", 2, "y"],
     "epsilon": 1.0},
    {"name": "ss", "kind": "categorical", "mechanism": "subset_selection",
     "domain": ["x", 2, "y", "z"], "epsilon": 1.0},
    {"name": "b", "kind": "boolean", "epsilon": 1.0},
    {"name": "s", "kind": "set", "universe": ["p", "q"], "max_items": 1, "epsilon": 1.0},
    {"name": "v", "kind": "vector", "dimension": 2, "l2_bound": 1.0, "epsilon": 1.0,
     "delta": 1e-6},
    {"name": "f", "kind": "functional", "grid": [0.0, 1.0], "bandwidth": 0.5,
     "rkhs_radius": 1.0, "epsilon": 0.9, "delta": 1e-6},
    {"name": "tp", "kind": "timestamp", "granularity": "1h"},
    {"name": "tn", "kind": "timestamp", "granularity": "1d", "epsilon": 1.0,
     "bounds": ["2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"]},
]  # fmt: skip


def test_every_kind_and_mechanism_of_the_config_has_one_registration() -> None:
    accepted = {
        (kind, mech)
        for kind, model in zip(FIELD_KINDS, FIELD_MODELS, strict=True)
        if kind != "drop"
        for mech in mechanisms_of(model) or (None,)
        if mech != AUTO  # resolved to a registered mechanism before lookup
    }
    assert set(REGISTRY) == accepted
    # and the example config above exercises every one of them
    # a timestamp's mechanism follows its epsilon: none without, discrete_laplace with
    written = {
        (f["kind"], f.get("mechanism", "discrete_laplace" if "epsilon" in f else None))
        if f["kind"] == "timestamp"
        else (f["kind"], "square_wave" if f.get("target") == "distribution" else f.get("mechanism"))
        for f in EVERY_KIND
        if f["kind"] != "drop"
    }
    defaults = {("real", None): "laplace", ("integer", None): "discrete_laplace"}
    defaults |= {
        ("categorical", None): "randomized_response",
        ("boolean", None): "randomized_response",
    }
    defaults |= {("set", None): "unary_encoding", ("vector", None): "gaussian"}
    defaults |= {("functional", None): "gaussian_process"}
    assert {(k, m or defaults.get((k, m))) for k, m in written} == accepted


def test_a_missing_registration_names_the_kind_and_mechanism() -> None:
    partial = dict(REGISTRY)
    del partial[("categorical", "local_hashing")]
    with pytest.raises(RegistryError, match="categorical with mechanism local_hashing"):
        check_registry(partial)


def test_a_registration_no_config_model_accepts_is_refused() -> None:
    extra = dataclasses.replace(REGISTRY[("categorical", "randomized_response")], mechanism="exp")
    with pytest.raises(RegistryError, match=r"categorical \(exp\).*no config model"):
        check_registry({**REGISTRY, extra.key: extra})


def test_a_noised_registration_without_explain_fails_when_made() -> None:
    whole = REGISTRY[("integer", "discrete_laplace")]
    with pytest.raises(RegistryError, match=r"integer \(discrete_laplace\).*lacks explain"):
        dataclasses.replace(whole, explain=None)
    assert issubclass(RegistryError, PrivstreamError)


@pytest.mark.parametrize("table", [ESTIMATORS, TARGETS], ids=["estimate", "audit"])
def test_each_layer_table_covers_exactly_the_noised_registrations(table: Any) -> None:
    noised = {key for key, entry in REGISTRY.items() if entry.mechanism is not None}
    assert set(table) == noised
    assert ("public", None) not in table
    partial = {k: v for k, v in table.items() if k != ("set", "unary_encoding")}
    with pytest.raises(RegistryError, match=r"layer's per-kind table: no entry for set"):
        check_table("layer", partial)
    with pytest.raises(RegistryError, match=r"entries for unregistered real \(exp\)"):
        check_table("layer", {**table, ("real", "exp"): None})


def test_every_noised_field_is_estimated_and_audited() -> None:
    """No silent omission: each noised field of every kind gets an accumulator and a target."""
    plan = build_plan(parse_config(config_dict(EVERY_KIND, epsilon=50.0, delta=1e-3)))
    noised = [f for f in plan.fields if f.handler.mechanism is not None]
    assert len(noised) == len(EVERY_KIND) - 3  # not drop, public, or a timestamp without epsilon
    for planned in noised:
        assert accumulator_for(planned, Options()) is not None, planned.name
        assert target_for(planned).name == planned.name
        spec = next(
            s
            for s in parse_config(config_dict(EVERY_KIND, 50.0, 1e-3)).fields
            if s.name == planned.name
        )
        share = plan.budget.fields[planned.name]
        assert registration_for(planned) is registration_of(resolve_auto(spec, share))


def test_memo_tokens_hold_domain_values_not_positions() -> None:
    """A memoized categorical's token carries the value, in the canonical JSON of the value."""
    field = {"name": "c", "kind": "categorical", "domain": ["z", 7, "a"], "epsilon": 1.0,
             "memo_identity": "message_key"}  # fmt: skip
    (planned,) = build_plan(parse_config(config_dict([field]))).fields
    assert planned.memo is not None
    handler: Any = planned.handler
    for value in ("z", 7, "a"):
        token = planned.memo.token(b"device", handler.parse(value))
        assert token.endswith(json.dumps(value).encode()), value


def test_a_memoized_kind_without_memo_support_fails_at_plan_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = ("boolean", "randomized_response")
    monkeypatch.setitem(REGISTRY, key, dataclasses.replace(REGISTRY[key], memo=None))
    field = {"name": "b", "kind": "boolean", "epsilon": 1.0, "memo_identity": "message_key"}
    with pytest.raises(RegistryError, match=r"kind boolean .*no memo token"):
        build_plan(parse_config(config_dict([field])))


def test_registrations_are_frozen_records() -> None:
    entry: FieldKind = REGISTRY[("real", "laplace")]
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.kind = "integer"  # type: ignore[misc]

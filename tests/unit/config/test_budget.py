"""Record budget: ``epsilon: auto`` shares and group-size scaling (DESIGN.md section 1).

Group privacy (correlated-DP seed, DESIGN.md "Correlated records and groups"):
an (eps, delta)-DP record mechanism is ``(k eps, k e^((k-1) eps) delta)``-DP
for a group of ``k`` records. With ``privacy.group_size: k`` the declared
shares are the group-level target, so each field is calibrated at
``eps_j / k`` and ``delta_j / (k exp((k-1) eps_e))`` with
``eps_e = sum(eps_j) / k``. The expected values below are written from
these formulas, not read from the code.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from privstream.cli.explain import explain_data, render_table
from privstream.config import AppConfig, parse_config, resolve_budget
from privstream.errors import ConfigError
from privstream.kinds import build_plan

from tests.support.configs import config_dict, laplace_tight_scale


def with_group(data: dict[str, Any], k: int) -> dict[str, Any]:
    data["privacy"]["group_size"] = k
    return data


# --- epsilon: auto -------------------------------------------------------------------

AUTO_FIELDS: list[dict[str, Any]] = [
    {"name": "salary", "kind": "real", "bounds": [0, 100], "epsilon": 0.5, "delta": 1e-6},
    {"name": "state", "kind": "categorical", "domain": ["a", "b", "c"], "epsilon": "auto"},
    {"name": "count", "kind": "integer", "bounds": [0, 9], "epsilon": "auto", "delta": 2e-6},
    {"name": "flag", "kind": "boolean", "epsilon": "auto"},
]


def test_auto_splits_the_remainder_evenly() -> None:
    config = parse_config(config_dict(AUTO_FIELDS, epsilon=2.0, delta=1e-5))
    budget = resolve_budget(config)
    # (2.0 - 0.5) / 3 autos = 0.5 each
    assert budget.declared["salary"].epsilon == 0.5
    for name in ("state", "count", "flag"):
        assert budget.declared[name].epsilon == pytest.approx(0.5, rel=1e-15)
    assert budget.declared["count"].delta == 2e-6
    assert budget.declared["state"].delta == 0.0
    # k = 1: calibration budgets are the declared ones
    assert budget.fields == budget.declared
    assert budget.event.epsilon == pytest.approx(2.0, rel=1e-15)
    assert budget.event.delta == pytest.approx(3e-6, rel=1e-15)


def test_auto_share_reaches_the_mechanisms() -> None:
    config = parse_config(config_dict(AUTO_FIELDS, epsilon=2.0, delta=1e-5))
    mechs = {h.name: h.mechanism for h in build_plan(config).handlers}
    for name in ("state", "count", "flag"):
        assert mechs[name] is not None
        assert mechs[name].epsilon == pytest.approx(0.5, rel=1e-15)  # type: ignore[union-attr]


def test_auto_with_uneven_remainder() -> None:
    fields: list[dict[str, Any]] = [
        {"name": "a", "kind": "boolean", "epsilon": 0.3},
        {"name": "b", "kind": "boolean", "epsilon": "auto"},
        {"name": "c", "kind": "boolean", "epsilon": "auto"},
    ]
    budget = resolve_budget(parse_config(config_dict(fields, epsilon=1.0)))
    assert budget.declared["b"].epsilon == pytest.approx(0.35, rel=1e-12)
    assert budget.declared["c"].epsilon == pytest.approx(0.35, rel=1e-12)


@pytest.mark.parametrize("explicit", [1.0, 1.5])
def test_auto_without_remainder_is_a_config_error(explicit: float) -> None:
    fields: list[dict[str, Any]] = [
        {"name": "a", "kind": "boolean", "epsilon": explicit},
        {"name": "b", "kind": "boolean", "epsilon": "auto"},
    ]
    with pytest.raises(ConfigError) as info:
        parse_config(config_dict(fields, epsilon=1.0))
    problems = info.value.problems
    assert len(problems) == 1
    assert problems[0].startswith("privacy.epsilon")
    assert "auto" in problems[0]


def test_auto_alone_takes_the_whole_budget() -> None:
    fields: list[dict[str, Any]] = [{"name": "a", "kind": "boolean", "epsilon": "auto"}]
    budget = resolve_budget(parse_config(config_dict(fields, epsilon=0.7)))
    assert budget.declared["a"].epsilon == 0.7


# --- group size ----------------------------------------------------------------------

GROUP_FIELDS: list[dict[str, Any]] = [
    {"name": "ts", "kind": "public"},
    {
        "name": "salary",
        "kind": "real",
        "mechanism": "laplace",
        "bounds": [0, 100],
        "epsilon": 0.5,
        "delta": 1e-6,
    },
    {"name": "count", "kind": "integer", "bounds": [0, 9], "epsilon": 0.75, "delta": 2e-6},
    {"name": "flag", "kind": "boolean", "epsilon": "auto"},
]
DECLARED = {"salary": (0.5, 1e-6), "count": (0.75, 2e-6), "flag": (0.75, 0.0)}


def explain_group(k: int) -> dict[str, Any]:
    config = group_config(k)
    return explain_data(config, build_plan(config))


def group_config(k: int) -> AppConfig:
    return parse_config(with_group(config_dict(GROUP_FIELDS, epsilon=2.0, delta=1e-5), k))


def expected_calibration(k: int) -> dict[str, tuple[float, float]]:
    """eps_j / k and delta_j / (k exp((k-1) eps_e)), eps_e = sum(eps_j) / k."""
    eps_event = math.fsum(e for e, _ in DECLARED.values()) / k
    factor = k * math.exp((k - 1) * eps_event)
    return {name: (e / k, d / factor) for name, (e, d) in DECLARED.items()}


@pytest.mark.parametrize("k", [2, 3, 10, 100])
def test_group_size_scales_each_field(k: int) -> None:
    budget = resolve_budget(group_config(k))
    assert budget.group_size == k
    for name, (eps, dlt) in expected_calibration(k).items():
        assert budget.declared[name].epsilon == pytest.approx(DECLARED[name][0], rel=1e-15)
        assert budget.declared[name].delta == DECLARED[name][1]
        assert budget.fields[name].epsilon == pytest.approx(eps, rel=1e-12)
        assert budget.fields[name].delta == pytest.approx(dlt, rel=1e-12, abs=0.0)


@pytest.mark.parametrize("k", [1, 2, 3, 10, 100])
def test_group_guarantee_equals_the_declared_sums(k: int) -> None:
    budget = resolve_budget(group_config(k))
    event_eps = math.fsum(g.epsilon for g in budget.fields.values())
    event_dlt = math.fsum(g.delta for g in budget.fields.values())
    assert budget.event.epsilon == pytest.approx(event_eps, rel=1e-12)
    assert budget.event.delta == pytest.approx(event_dlt, rel=1e-12)
    # group privacy applied to the event-level guarantee
    group_eps = k * event_eps
    group_dlt = k * math.exp((k - 1) * event_eps) * event_dlt
    declared_eps = math.fsum(e for e, _ in DECLARED.values())
    declared_dlt = math.fsum(d for _, d in DECLARED.values())
    assert group_eps == pytest.approx(declared_eps, rel=1e-12)
    assert group_dlt == pytest.approx(declared_dlt, rel=1e-12)
    assert budget.group.epsilon == pytest.approx(declared_eps, rel=1e-12)
    assert budget.group.delta == pytest.approx(declared_dlt, rel=1e-12)


def test_group_size_one_is_the_identity() -> None:
    explicit = resolve_budget(group_config(1))
    default = resolve_budget(parse_config(config_dict(GROUP_FIELDS, epsilon=2.0, delta=1e-5)))
    assert default.group_size == 1
    for budget in (explicit, default):
        assert budget.fields == budget.declared
        assert budget.event == budget.group
        for name, (eps, dlt) in DECLARED.items():
            assert budget.fields[name].epsilon == pytest.approx(eps, rel=1e-15)
            assert budget.fields[name].delta == dlt


@pytest.mark.parametrize("k", [0, -1])
def test_group_size_below_one_is_rejected(k: int) -> None:
    with pytest.raises(ConfigError) as info:
        group_config(k)
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith("privacy.group_size")


@pytest.mark.parametrize("k", [2, 5])
def test_mechanisms_are_built_with_the_scaled_budget(k: int) -> None:
    plan = build_plan(group_config(k))
    mechs = {h.name: h.mechanism for h in plan.handlers}
    assert mechs["ts"] is None
    for name, (eps, dlt) in expected_calibration(k).items():
        mech = mechs[name]
        assert mech is not None
        assert mech.epsilon == pytest.approx(eps, rel=1e-12)
        assert mech.delta == pytest.approx(dlt, rel=1e-12, abs=0.0)
    # the Laplace scale follows the scaled budget: b = diam / (eps/k - 2 ln(1 - delta'))
    eps, dlt = expected_calibration(k)["salary"]
    salary = mechs["salary"]
    assert salary.continuous_scale == pytest.approx(  # type: ignore[union-attr]
        laplace_tight_scale(100.0, eps, dlt), rel=1e-12
    )
    # the plan's record guarantee is the event level (what one release satisfies)
    assert plan.epsilon == pytest.approx(2.0 / k, rel=1e-12)


def test_large_epsilon_with_group_size_does_not_crash() -> None:
    # k = 2, two fields at eps 800: exp((k-1) * 800) overflows a double; every delta is 0,
    # so the exact answer is calibrated eps 400 each and delta 0.
    fields = [
        {"name": "a", "kind": "real", "bounds": [0, 1], "epsilon": 800.0},
        {"name": "b", "kind": "boolean", "epsilon": 800.0},
    ]
    data = with_group(config_dict(fields, epsilon=1600.0), 2)
    try:
        config = parse_config(data)
    except ConfigError as exc:  # refusing the config with a readable line is acceptable too
        assert any("group_size" in p or "epsilon" in p for p in exc.problems)
        return
    budget = resolve_budget(config)
    assert budget.fields["a"].epsilon == pytest.approx(400.0)
    assert budget.fields["a"].delta == 0.0
    assert budget.group.epsilon == pytest.approx(1600.0)
    assert budget.group.delta == 0.0


# --- explain -------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 4])
def test_explain_reports_group_level(k: int) -> None:
    config = group_config(k)
    data = explain_data(config, build_plan(config))
    record = data["record"]
    assert record["group_size"] == k
    assert record["group_epsilon"] == pytest.approx(2.0, rel=1e-12)
    assert record["group_delta"] == pytest.approx(3e-6, rel=1e-12)
    assert record["epsilon"] == pytest.approx(2.0 / k, rel=1e-12)
    expected = expected_calibration(k)
    by_name = {f["name"]: f for f in data["fields"]}
    for name, (eps, dlt) in expected.items():
        entry = by_name[name]
        assert entry["declared_epsilon"] == pytest.approx(DECLARED[name][0], rel=1e-15)
        assert entry["declared_delta"] == DECLARED[name][1]
        assert entry["epsilon"] == pytest.approx(eps, rel=1e-12)
        assert entry["delta"] == pytest.approx(dlt, rel=1e-12, abs=0.0)
    assert "declared_epsilon" not in by_name["ts"]


def test_explain_table_mentions_group_privacy_only_for_groups() -> None:
    single = render_table(explain_group(1))
    group = render_table(explain_group(4))
    assert "group privacy" not in single
    assert "group privacy" in group
    assert "up to 4 records" in group

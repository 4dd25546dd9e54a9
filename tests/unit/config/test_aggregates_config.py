"""The ``aggregates:`` list: its checks name the aggregate and the fix; its budget charge."""

from __future__ import annotations

import math
from typing import Any

import pytest
from privstream.config import config_sha256, parse_config, resolve_budget
from privstream.errors import ConfigError

from tests.support.aggregates import FIELDS, aggregates_config

COUNT = {"name": "c", "query": "count", "epsilon": 0.5}


def problems(*aggregates: dict[str, Any], **privacy: Any) -> str:
    with pytest.raises(ConfigError) as info:
        aggregates_config(*aggregates, **privacy)
    return "\n".join(info.value.problems)


@pytest.mark.parametrize(
    ("aggregate", "message"),
    [
        ({**COUNT, "field": "os"}, "a count counts records: remove field"),
        ({**COUNT, "query": "histogram"}, "query histogram needs field"),
        ({**COUNT, "query": "histogram", "field": "latency"}, "must be categorical with a domain"),
        ({**COUNT, "query": "sum", "field": "latency"}, "needs bounds"),
        ({**COUNT, "query": "mean", "field": "os", "bounds": [0, 1]}, "of kind categorical"),
        ({**COUNT, "bounds": [0, 1]}, "takes no bounds"),
        ({**COUNT, "group_by": [{"field": "latency"}]}, "only public or categorical"),
        ({**COUNT, "group_by": [{"field": "version"}]}, "has no domain: list its keys"),
        ({**COUNT, "group_by": [{"field": "nope", "keys": [1]}]}, "is not in fields"),
        (
            {**COUNT, "contribution": {"records_per_group": 1, "groups_per_subject": 1}},
            "set privacy.subject",
        ),
        ({**COUNT, "correlation": {"by": "nope", "degree": 0.5, "max_group": 3}}, "is not a field"),
        ({**COUNT, "query": "median"}, "'count', 'histogram', 'sum', 'mean' or 'density'"),
        ({**COUNT, "name": "a b"}, "should match pattern"),
    ],
)
def test_each_problem_names_the_aggregate_and_the_fix(
    aggregate: dict[str, Any], message: str
) -> None:
    found = problems(aggregate)
    assert message in found
    assert found.startswith(f"aggregates[0] ({aggregate['name']})")


def test_a_subject_needs_contribution_bounds_and_excludes_correlation() -> None:
    assert "give contribution: {records_per_group: 1" in problems(COUNT, subject="user")
    correlated = {
        **COUNT,
        "contribution": {"records_per_group": 1, "groups_per_subject": 1},
        "correlation": {"by": "home", "degree": 0.5, "max_group": 3},
    }
    assert "without privacy.subject" in problems(correlated, subject="user")
    corr_only = {**COUNT, "correlation": {"by": "home", "degree": 0.5, "max_group": 3}}
    assert "group_size 1" in problems(corr_only, group_size=2)


def test_names_are_unique_and_cells_are_bounded() -> None:
    assert "aggregates[1] (c).name: named twice" in problems(COUNT, COUNT)
    many = {**COUNT, "group_by": [{"field": "version", "keys": list(range(100_001))}]}
    assert "above the limit 100000" in problems(many)


def test_the_windows_open_at_once_are_bounded() -> None:
    """(grace + the 300 s future allowance) / size at most 10,000 (red team 14b, F4), with
    the Kafka timestamp or ``window.time`` alike: at the limit accepted, one second over
    refused, naming the aggregate, the count, the limit and the size that fits."""
    at_limit = {"size_seconds": 2, "grace_seconds": 20_000 - 300}
    aggregates_config({**COUNT, "window": at_limit})
    over = {**COUNT, "window": {**at_limit, "grace_seconds": 20_000 - 300 + 1}}
    found = problems(over)
    assert found.startswith("aggregates[0] (c).window: grace_seconds 19701")
    assert "10001 windows be open at once per input partition, above the limit 10000" in found
    assert "give size_seconds at least 3 or a shorter grace_seconds" in found


def _data(privacy_epsilon: float, privacy_delta: float, *aggregates: dict[str, Any]) -> Any:
    return {
        "kafka": {"input_topic": "raw", "output_topic": "out", "dead_letter_topic": "dlq"},
        "privacy": {"epsilon": privacy_epsilon, "delta": privacy_delta},
        "fields": FIELDS,
        "aggregates": list(aggregates),
    }


def test_each_aggregate_charges_twice_its_epsilon_against_the_record_budget() -> None:
    parse_config(_data(2.0, 0.0, COUNT))  # fields 1 + 2 * 0.5 = 2: fits
    with pytest.raises(ConfigError) as info:
        parse_config(_data(1.9, 0.0, COUNT))
    (problem,) = info.value.problems
    assert "with each aggregate's 2 eps and (1 + e^eps) delta" in problem
    assert "sum to 2, above the per-record budget 1.9" in problem


def test_an_aggregates_delta_charges_one_plus_e_to_the_epsilon() -> None:
    needed = (1.0 + math.exp(0.5)) * 1e-6
    parse_config(_data(2.0, needed * 1.000001, {**COUNT, "delta": 1e-6}))
    with pytest.raises(ConfigError, match=r"privacy\.delta"):
        parse_config(_data(2.0, needed * 0.999, {**COUNT, "delta": 1e-6}))


def test_auto_fields_share_what_the_aggregates_leave() -> None:
    data = _data(3.0, 0.0, COUNT)
    data["fields"] = [*FIELDS[:3], {**FIELDS[3], "epsilon": "auto"}, FIELDS[4]]
    budget = resolve_budget(parse_config(data))
    assert budget.fields["os"].epsilon == pytest.approx(3.0 - 0.5 - 1.0)


def test_the_config_hash_changes_with_aggregates_only() -> None:
    plain = parse_config(_data(3.0, 0.0))
    with_one = parse_config(_data(3.0, 0.0, COUNT))
    assert config_sha256(plain) != config_sha256(with_one)
    data = _data(3.0, 0.0)
    del data["aggregates"]
    assert config_sha256(parse_config(data)) == config_sha256(plain)


DENSITY = {
    "name": "d",
    "query": "density",
    "field": "latency",
    "bounds": [0, 100],
    "grid": [0, 50, 100],
    "bandwidth": 10,
    "epsilon": 0.5,
    "delta": 1e-6,
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"grid": None}, "grid and bandwidth go with query density"),
        ({"bandwidth": -1}, "greater than 0"),
        ({"delta": 0.0}, "give delta > 0"),
        ({"grid": [0, 100, 50]}, "in increasing order"),
        ({"grid": [0, float("inf")]}, "finite number"),
        ({"group_by": [{"field": "os"}]}, "takes no group_by or correlation"),
    ],
)
def test_a_density_needs_a_grid_a_bandwidth_and_delta(change: dict[str, Any], message: str) -> None:
    spec = {k: v for k, v in {**DENSITY, **change}.items() if v is not None}
    assert message in problems(spec)


def test_grid_and_bandwidth_are_refused_elsewhere() -> None:
    assert "only with it" in problems({**COUNT, "grid": [1.0], "bandwidth": 1.0})


SELECT = {**COUNT, "group_by": [{"field": "version"}], "select_groups": True, "delta": 1e-6}


def test_select_groups_lets_a_public_group_come_without_keys() -> None:
    assert "select_groups: true" in problems({**SELECT, "select_groups": False})
    (config,) = [aggregates_config(SELECT, delta=1e-5)]
    assert config.aggregates[0].select_groups


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"delta": 0.0}, "select_groups needs delta > 0"),
        ({"query": "sum", "field": "latency", "bounds": [0, 1]}, "use count, histogram or mean"),
        ({"group_by": []}, "select_groups needs group_by"),
    ],
)
def test_select_groups_needs_a_noisy_count_delta_and_groups(
    change: dict[str, Any], message: str
) -> None:
    assert message in problems({**SELECT, **change}, delta=1e-5)

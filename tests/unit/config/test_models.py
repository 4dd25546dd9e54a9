"""Config validation: every problem on its own line, naming the field path."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from privstream.config import config_sha256, load_config, parse_config, record_budget
from privstream.errors import ConfigError
from privstream.mechanisms.validation import check_bounds

from tests.support.configs import KAFKA, config_dict

SALARY: dict[str, Any] = {
    "name": "salary",
    "kind": "real",
    "bounds": [1504, 4500],
    "mechanism": "laplace",
    "epsilon": 1.0,
}
STATE: dict[str, Any] = {
    "name": "state",
    "kind": "categorical",
    "domain": ["TX", "CA", "NY"],
    "mechanism": "randomized_response",
    "epsilon": 1.0,
}

ISSUE_EXAMPLE = """\
kafka:
  bootstrap_servers: "127.0.0.1:9092"
  input_topic: people.raw
  output_topic: people.sanitized
  dead_letter_topic: people.dlq
privacy:
  epsilon: 2
  delta: 1e-6
fields:
  - name: device_id
    kind: drop
  - name: ts
    kind: public
  - name: salary
    kind: real
    bounds: [1504, 4500]
    mechanism: laplace
    epsilon: 1
  - name: state
    kind: categorical
    domain: [TX, CA, NY]
    mechanism: randomized_response
    epsilon: 1
"""


def problems_of(data: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    problems = info.value.problems
    assert problems, "ConfigError must list at least one problem"
    assert all("\n" not in p for p in problems)
    assert str(info.value) == "\n".join(problems)
    return problems


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "privstream.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# --- accepted ------------------------------------------------------------------------


def test_issue_example_is_accepted(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ISSUE_EXAMPLE))
    assert [f.name for f in config.fields] == ["device_id", "ts", "salary", "state"]
    assert [f.kind for f in config.fields] == ["drop", "public", "real", "categorical"]
    salary, state = config.fields[2], config.fields[3]
    assert salary.bounds == (1504.0, 4500.0)  # type: ignore[union-attr]
    assert salary.calibration == "tight"  # type: ignore[union-attr]
    assert state.domain == ("TX", "CA", "NY")  # type: ignore[union-attr]
    assert config.privacy.epsilon == 2.0
    assert config.privacy.delta == 1e-6
    assert config.kafka.input_topic == "people.raw"
    assert record_budget(config) == (2.0, 0.0)


def test_float_sum_within_budget_is_accepted() -> None:
    # 0.1 + 0.2 = 0.30000000000000004 > 0.3 in floating point, but it fits the budget
    fields = [
        {**SALARY, "epsilon": 0.1},
        {**STATE, "epsilon": 0.2},
    ]
    config = parse_config(config_dict(fields, epsilon=0.3))
    eps, delta = record_budget(config)
    assert eps == pytest.approx(0.3)
    assert delta == 0.0


def test_deltas_exactly_at_budget_are_accepted() -> None:
    fields = [
        {**SALARY, "delta": 5e-7},
        {**STATE, "delta": 5e-7},
    ]
    config = parse_config(config_dict(fields, epsilon=2.0, delta=1e-6))
    assert record_budget(config)[1] == pytest.approx(1e-6)


def test_drop_and_public_fields_consume_no_budget() -> None:
    fields = [{"name": "id", "kind": "drop"}, {"name": "ts", "kind": "public"}, SALARY]
    config = parse_config(config_dict(fields, epsilon=1.0))
    assert record_budget(config) == (1.0, 0.0)


def test_defaults_and_types_of_other_kinds() -> None:
    fields = [
        {"name": "flag", "kind": "boolean", "epsilon": 0.5},
        {
            "name": "n",
            "kind": "categorical",
            "domain": [1, 2, "2"],
            "epsilon": 0.5,
            "unknown_as": 1,
        },
    ]
    config = parse_config(config_dict(fields, epsilon=1.0))
    flag, n = config.fields
    assert flag.delta == 0.0  # type: ignore[union-attr]
    assert flag.mechanism == "randomized_response"  # type: ignore[union-attr]
    assert n.domain == (1, 2, "2")  # type: ignore[union-attr]
    assert n.unknown_as == 1  # type: ignore[union-attr]


def test_config_hash_ignores_kafka_but_not_privacy() -> None:
    a = parse_config(config_dict([SALARY], epsilon=1.0))
    other_kafka = config_dict([SALARY], epsilon=1.0)
    other_kafka["kafka"]["bootstrap_servers"] = "10.0.0.1:9092"
    b = parse_config(other_kafka)
    c = parse_config(config_dict([{**SALARY, "epsilon": 0.5}], epsilon=1.0))
    assert config_sha256(a) == config_sha256(b)
    assert config_sha256(a) != config_sha256(c)
    assert len(config_sha256(a)) == 64


# --- rejected, one problem each --------------------------------------------------------


def test_epsilons_above_record_budget() -> None:
    problems = problems_of(config_dict([SALARY, STATE], epsilon=1.5))
    assert len(problems) == 1
    line = problems[0]
    assert line.startswith("privacy.epsilon: ")
    assert "sum to 2" in line
    assert "1.5" in line


def test_deltas_above_record_budget() -> None:
    fields = [{**SALARY, "delta": 1e-6}, {**STATE, "delta": 1e-6}]
    problems = problems_of(config_dict(fields, epsilon=2.0, delta=1e-6))
    assert len(problems) == 1
    assert problems[0].startswith("privacy.delta: ")
    assert "2e-06" in problems[0]


def test_field_delta_with_zero_record_delta() -> None:
    problems = problems_of(config_dict([{**SALARY, "delta": 1e-9}], epsilon=1.0))
    assert [p.split(":")[0] for p in problems] == ["privacy.delta"]


@pytest.mark.parametrize("eps", [0, 0.0, -1, -0.5])
def test_field_epsilon_not_positive(eps: float) -> None:
    fields = [{"name": "ts", "kind": "public"}, {**SALARY, "epsilon": eps}]
    problems = problems_of(config_dict(fields))
    assert len(problems) == 1
    assert problems[0].startswith("fields[1] (salary).epsilon: ")
    assert "> 0" in problems[0]


@pytest.mark.parametrize("eps", [0, -3])
def test_record_epsilon_not_positive(eps: float) -> None:
    problems = problems_of(config_dict([SALARY], epsilon=eps))
    assert problems[0].startswith("privacy.epsilon: ")


@pytest.mark.parametrize("delta", [1.0, -0.1, 1.5])
def test_field_delta_outside_unit_interval(delta: float) -> None:
    fields = [{"name": "ts", "kind": "public"}, {**SALARY, "delta": delta}]
    problems = problems_of(config_dict(fields, epsilon=10.0, delta=0.5))
    assert len(problems) == 1
    assert problems[0].startswith("fields[1] (salary).delta: ")
    assert "[0, 1)" in problems[0]


def test_record_delta_of_one() -> None:
    problems = problems_of(config_dict([SALARY], epsilon=1.0, delta=1.0))
    assert problems[0].startswith("privacy.delta: ")


def test_bounds_reversed() -> None:
    fields = [
        {"name": "a", "kind": "public"},
        {"name": "b", "kind": "public"},
        {**SALARY, "bounds": [4500, 1504]},
    ]
    problems = problems_of(config_dict(fields))
    assert len(problems) == 1
    assert problems[0].startswith("fields[2] (salary).bounds: ")
    assert "reversed" in problems[0]


def test_bounds_not_finite_in_yaml(tmp_path: Path) -> None:
    text = ISSUE_EXAMPLE.replace("bounds: [1504, 4500]", "bounds: [1504, .inf]")
    assert ".inf" in text
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith("fields[2] (salary).bounds: ")
    assert "finite" in info.value.problems[0]


def test_bounds_with_three_numbers() -> None:
    fields = [{"name": "ts", "kind": "public"}, {**SALARY, "bounds": [1, 2, 3]}]
    problems = problems_of(config_dict(fields))
    assert len(problems) == 1
    assert problems[0].startswith("fields[1] (salary).bounds")


@pytest.mark.parametrize("domain", [["TX"], []])
def test_domain_with_fewer_than_two_values(domain: list[str]) -> None:
    fields = [{"name": "ts", "kind": "public"}, {**STATE, "domain": domain}]
    problems = problems_of(config_dict(fields))
    assert len(problems) == 1
    assert problems[0].startswith("fields[1] (state).domain: ")
    assert "at least 2" in problems[0]


def test_duplicate_domain_values() -> None:
    fields = [{"name": "ts", "kind": "public"}, {**STATE, "domain": ["TX", "CA", "TX"]}]
    problems = problems_of(config_dict(fields))
    assert len(problems) == 1
    assert problems[0].startswith("fields[1] (state).domain: ")
    assert "twice" in problems[0]


def test_unknown_as_outside_domain() -> None:
    fields = [{"name": "ts", "kind": "public"}, {**STATE, "unknown_as": "ZZ"}]
    problems = problems_of(config_dict(fields))
    assert len(problems) == 1
    assert problems[0].startswith("fields[1] (state)")
    assert "unknown_as" in problems[0]


def test_boolean_domain_value_is_rejected() -> None:
    # YAML 1.1 reads NO as false; a bool must not silently become a category
    fields = [{"name": "ts", "kind": "public"}, {**STATE, "domain": ["TX", False]}]
    problems = problems_of(config_dict(fields))
    assert all(p.startswith("fields[1] (state).domain") for p in problems)


def test_field_named_twice() -> None:
    fields = [SALARY, {"name": "ts", "kind": "public"}, {"name": "salary", "kind": "drop"}]
    problems = problems_of(config_dict(fields))
    assert len(problems) == 2
    assert problems[0].startswith("fields[0] (salary).name: ")
    assert problems[1].startswith("fields[2] (salary).name: ")
    assert all("2 times" in p for p in problems)


def test_unknown_key_at_top_level() -> None:
    data = config_dict([SALARY])
    data["privacyy"] = {}
    problems = problems_of(data)
    assert len(problems) == 1
    assert problems[0].startswith("privacyy: unknown key")


def test_unknown_key_in_kafka() -> None:
    data = config_dict([SALARY])
    data["kafka"]["bootstrap_server"] = "x:1"
    problems = problems_of(data)
    assert len(problems) == 1
    assert problems[0].startswith("kafka.bootstrap_server: unknown key")


def test_unknown_key_in_field() -> None:
    fields = [{"name": "ts", "kind": "public"}, {**SALARY, "epsilom": 1.0}]
    problems = problems_of(config_dict(fields))
    assert len(problems) == 1
    assert problems[0].startswith("fields[1] (salary).epsilom: unknown key")


def test_public_field_with_epsilon_is_unknown_key() -> None:
    fields = [SALARY, {"name": "ts", "kind": "public", "epsilon": 1.0}]
    problems = problems_of(config_dict(fields))
    assert len(problems) == 1
    assert problems[0].startswith("fields[1] (ts).epsilon: unknown key")


def test_unknown_kind() -> None:
    fields = [SALARY, {"name": "zip", "kind": "postcode", "epsilon": 1.0}]
    problems = problems_of(config_dict(fields))
    assert len(problems) == 1
    assert problems[0].startswith("fields[1] (zip).kind: unknown field kind")
    for kind in ("drop", "public", "real", "categorical", "boolean"):
        assert kind in problems[0]


def test_missing_required_keys() -> None:
    data = config_dict([SALARY])
    del data["kafka"]["input_topic"]
    fields_missing = {k: v for k, v in SALARY.items() if k != "bounds"}
    data["fields"] = [{"name": "ts", "kind": "public"}, fields_missing]
    problems = problems_of(data)
    assert sorted(problems) == sorted(
        [
            "kafka.input_topic: required key is missing",
            "fields[1] (salary).bounds: required key is missing",
        ]
    )


def test_same_topic_twice() -> None:
    data = config_dict([SALARY])
    data["kafka"]["output_topic"] = data["kafka"]["input_topic"]
    problems = problems_of(data)
    assert len(problems) == 1
    assert problems[0].startswith("kafka")


@pytest.mark.parametrize("data", [None, [1, 2], "text", 3])
def test_top_level_not_a_mapping(data: Any) -> None:
    problems = problems_of(data)
    assert len(problems) == 1
    assert "mapping" in problems[0]


def test_empty_field_list() -> None:
    problems = problems_of(config_dict([]))
    assert len(problems) == 1
    assert problems[0].startswith("fields")


def test_several_problems_are_all_reported_one_line_each() -> None:
    data = config_dict(
        [
            {"name": "ts", "kind": "public"},
            {**SALARY, "epsilon": 0},
            {**SALARY, "name": "bonus", "bounds": [9, 1]},
            {**STATE, "domain": ["TX", "TX"]},
            {"name": "ts", "kind": "drop"},
        ]
    )
    data["kafka"]["colour"] = "blue"
    problems = problems_of(data)
    heads = sorted(p.split(": ")[0] for p in problems)
    assert heads == sorted(
        [
            "fields[1] (salary).epsilon",
            "fields[2] (bonus).bounds",
            "fields[3] (state).domain",
            "kafka.colour",
            "fields[0] (ts).name",
            "fields[4] (ts).name",
        ]
    )


def test_budget_problems_are_reported_together() -> None:
    fields = [{**SALARY, "delta": 0.2}, {**STATE, "delta": 0.2}]
    problems = problems_of(config_dict(fields, epsilon=1.0, delta=0.1))
    assert sorted(p.split(":")[0] for p in problems) == ["privacy.delta", "privacy.epsilon"]


def test_single_invalid_field_gives_exactly_one_line() -> None:
    problems = problems_of(config_dict([{**SALARY, "epsilon": 0}]))
    assert problems == ["fields[0] (salary).epsilon: epsilon 0.0 must be a finite number > 0"]


def test_nan_epsilon_is_rejected() -> None:
    problems = problems_of(config_dict([{**SALARY, "epsilon": math.nan}, STATE]))
    assert problems[0].startswith("fields[0] (salary).epsilon: ")


# --- files -------------------------------------------------------------------------


def test_invalid_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "kafka:\n  input_topic: [unclosed\nprivacy: {epsilon: 1}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert len(info.value.problems) == 1
    line = info.value.problems[0]
    assert line.startswith(f"config {path}: not valid YAML")
    assert " at line " in line


def test_invalid_yaml_names_line_column_and_cause(tmp_path: Path) -> None:
    # line 2 "  a: b: c": a second ': ' inside a plain scalar, at column 7
    path = write(tmp_path, "kafka:\n  a: b: c\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == [
        f"config {path}: not valid YAML at line 2, column 7: mapping values are not allowed here"
    ]


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith(f"config {path}: cannot read it")


def test_empty_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, ""))
    assert len(info.value.problems) == 1
    assert "mapping" in info.value.problems[0]


def test_load_reports_field_paths_from_yaml(tmp_path: Path) -> None:
    text = ISSUE_EXAMPLE.replace("epsilon: 1\n", "epsilon: -1\n", 1)
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert [p.split(": ")[0] for p in info.value.problems] == ["fields[2] (salary).epsilon"]


def test_kafka_defaults() -> None:
    config = parse_config({"kafka": dict(KAFKA), "privacy": {"epsilon": 1}, "fields": [SALARY]})
    assert config.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert config.privacy.delta == 0.0


# --- numeric limits (privstream.mechanisms.validation) -----------------------------------


def test_bounds_at_the_magnitude_limit_are_accepted_and_beyond_refused() -> None:
    limit = 2.0**1002
    assert check_bounds((-limit, limit)) == (-limit, limit)
    beyond = {**SALARY, "bounds": [-limit, math.nextafter(limit, math.inf)], "epsilon": 1.0}
    (problem,) = problems_of(config_dict([beyond], epsilon=1.0))
    assert problem.startswith("fields[0] (salary).bounds: ")
    assert "2**1002" in problem and "larger unit" in problem


def test_noise_scale_limit_uses_the_fields_resolved_share() -> None:
    """Width 1e287 at epsilon 1 gives scale 1e287 < 2^962 (3.9e289); / group_size 1000: above."""
    field = {**SALARY, "bounds": [0.0, 1e287], "epsilon": "auto"}
    parse_config(config_dict([field], epsilon=1.0))
    data = config_dict([field], epsilon=1.0)
    data["privacy"]["group_size"] = 1000
    (problem,) = problems_of(data)
    assert problem.startswith("fields[0] (salary): bounds [0, 1e+287]")
    assert "epsilon 0.001 (this field's share)" in problem
    assert "2**962" in problem and "raise epsilon or reduce the bounds' width" in problem


def test_tiny_width_and_subnormal_bounds_are_refused() -> None:
    for bounds in ([0.0, 1e-320], [5e-324, 1e-323], [-1e-306, 1e-306]):
        (problem,) = problems_of(config_dict([{**SALARY, "bounds": bounds}], epsilon=1.0))
        assert problem.startswith("fields[0] (salary): bounds ")
        assert "2**-1012" in problem and "smaller unit" in problem
    # equal bounds release the constant: no grid at all, accepted
    parse_config(config_dict([{**SALARY, "bounds": [1e-320, 1e-320]}], epsilon=1.0))


def test_epsilons_summing_beyond_the_double_range_are_refused() -> None:
    fields = [{**SALARY, "epsilon": 1.7e308}, {**SALARY, "name": "bonus", "epsilon": 1.7e308}]
    (problem,) = problems_of(config_dict(fields, epsilon=1.7e308))
    assert problem.startswith("fields: the fields' epsilons sum beyond the largest double")


# --- errors a person can act on (issue 36, item 5) -----------------------------------------


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return info.value.problems


def test_type_instead_of_kind_names_the_key_and_the_fix() -> None:
    (problem,) = _problems(config_dict([{"name": "x", "type": "real", "bounds": [0, 1]}]))
    assert problem.startswith("fields[0] (x): 'type' is not a field option; did you mean 'kind'?")
    assert "Unable to extract tag" not in problem


def test_a_missing_kind_lists_the_kinds() -> None:
    (problem,) = _problems(config_dict([{"name": "x", "bounds": [0, 1]}]))
    assert problem.startswith("fields[0] (x).kind: required key is missing; use one of drop,")


@pytest.mark.parametrize(
    ("section", "typo", "meant"),
    [("privacy", "epslion", "epsilon"), ("kafka", "input_topik", "input_topic")],
)
def test_a_misspelled_section_key_gets_a_suggestion(section: str, typo: str, meant: str) -> None:
    data = config_dict([{"name": "x", "kind": "real", "bounds": [0, 1], "epsilon": 1}])
    data[section][typo] = 1
    (problem,) = _problems(data)
    assert (
        problem == f"{section}.{typo}: unknown key; did you mean {meant!r}? (docs/configuration.md)"
    )


def test_a_misspelled_field_key_kind_and_mechanism_get_suggestions() -> None:
    problems = _problems(config_dict([{"name": "x", "kind": "real", "bonds": [0, 1]}]))
    assert "fields[0] (x).bonds: unknown key; did you mean 'bounds'? (docs/configuration.md)" in (
        problems
    )
    (kind,) = _problems(config_dict([{"name": "x", "kind": "reel", "bounds": [0, 1]}]))
    assert kind.startswith("fields[0] (x).kind: unknown field kind 'reel'; did you mean 'real'?")
    spec = {"name": "x", "kind": "real", "bounds": [0, 1], "epsilon": 1, "mechanism": "laplase"}
    (mechanism,) = _problems(config_dict([spec]))
    assert mechanism.endswith("did you mean 'laplace'?")


def test_a_key_far_from_every_option_gets_no_guess() -> None:
    data = config_dict([{"name": "x", "kind": "real", "bounds": [0, 1], "epsilon": 1, "zzzzqq": 1}])
    (problem,) = _problems(data)
    assert problem.endswith(
        "zzzzqq: unknown key; remove it or check its spelling (docs/configuration.md)"
    )


def test_explicit_epsilons_over_the_budget_give_the_sum_and_the_budget() -> None:
    fields = [
        {"name": "x", "kind": "real", "bounds": [0, 1], "epsilon": 1.5},
        {"name": "y", "kind": "real", "bounds": [0, 1], "epsilon": 1.0},
        {"name": "z", "kind": "real", "bounds": [0, 1], "epsilon": "auto"},
    ]
    (problem,) = _problems(config_dict(fields, epsilon=2.0))
    assert problem.startswith(
        "privacy.epsilon: the explicit field epsilons sum to 2.5, more than the per-record "
        "budget 2, so nothing is left"
    )

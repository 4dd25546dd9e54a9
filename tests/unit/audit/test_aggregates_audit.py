"""``privstream audit`` over aggregates: neighbouring windows at the unit's bounds, released
through the real ``release``; the audit passes the real code and fails it at half noise.

The draws use seeded noise (``tests.support.aggregates.Seeded``, fixed seeds), so every
outcome here is reproducible. What each assertion would do with fresh seeds:

* a correct aggregate is reported failing with probability at most the ``alpha`` of
  its audit (``ALPHA`` = 1e-3; Bonferroni over the Clopper-Pearson intervals,
  ``privstream.audit.stats``);
* a half-noise control passes with at most its ``false_pass_bound``, computed exactly
  from the discrete Laplace law and asserted below 1e-9 where it is known (one moved
  cell); the multi-cell control's bound (realised eps 2 against a claim of 1 at
  5,000 draws) is not computed: its lower bound comes out near 1.7.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from privstream.aggregates import AggregatePlan
from privstream.audit.aggregate_controls import (
    AggregateScenarios,
    half_noise_scenario,
    halve_noise,
)
from privstream.audit.aggregate_inputs import neighbours
from privstream.audit.aggregates import aggregate_scenario
from privstream.audit.engine import run_scenario
from privstream.cli.main import main

from tests.support.aggregates import FIELDS, Seeded, aggregates_config, one_plan

ALPHA = 1e-3
SAMPLES = 5_000
SUBJECT = {"subject": "user"}
HISTOGRAM = {
    "name": "os_share",
    "query": "histogram",
    "field": "os",
    "epsilon": 0.5,
    "contribution": {"records_per_group": 1, "groups_per_subject": 1},
}
COUNT = {
    "name": "per_version",
    "query": "count",
    "group_by": [{"field": "version", "keys": ["1.0", "2.0", "3.0"]}],
    "epsilon": 1.0,
    "contribution": {"records_per_group": 3, "groups_per_subject": 1},
}
SUM = {
    "name": "latency_sum",
    "query": "sum",
    "field": "latency",
    "bounds": [0, 100],
    "epsilon": 1.0,
    "contribution": {"records_per_group": 2, "groups_per_subject": 1},
}
SPREAD = {
    **COUNT,
    "name": "spread",
    "contribution": {"records_per_group": 2, "groups_per_subject": 2},
}


def test_the_neighbours_differ_by_the_unit_at_its_bounds_and_no_more() -> None:
    plan = one_plan(SPREAD, **SUBJECT)
    with_unit, without = neighbours(plan)
    moved = {c: with_unit.counts.get(c, 0) - without.counts.get(c, 0) for c in plan.cells}
    # 3 records in each of 3 cells offered; the accumulator keeps 2 in the first 2
    assert moved == {("1.0",): 2, ("2.0",): 2, ("3.0",): 0}
    assert all(without.counts[c] == 1 for c in plan.cells)  # one background record each


def test_a_correlated_unit_swaps_the_next_record_of_its_group_in() -> None:
    spec = {
        "name": "flu",
        "query": "histogram",
        "field": "os",
        "epsilon": 1.0,
        "correlation": {"by": "home", "degree": 0.3, "max_group": 4},
    }
    with_unit, without = neighbours(one_plan(spec))
    moved = {c: with_unit.counts.get(c, 0) - without.counts.get(c, 0) for c in with_unit.counts}
    assert moved == {("ios",): 1, ("android",): -1, ("web",): 0}


def test_a_unit_that_moves_no_total_is_audited_on_every_row() -> None:
    spec = {
        "name": "cases",
        "query": "count",
        "epsilon": 1.0,
        "correlation": {"by": "home", "degree": 0.5, "max_group": 3},
    }
    plan = one_plan(spec)
    with_unit, without = neighbours(plan)
    assert with_unit.counts == without.counts  # the swap leaves a single count unchanged
    result = _run(plan, 6)
    assert result.passed and result.test_sets > 0


def _run(plan: AggregatePlan, seed: int, *, broken: bool = False) -> Any:
    noise = Seeded(seed)
    scenario = half_noise_scenario(plan, noise) if broken else aggregate_scenario(plan, noise)
    return run_scenario(scenario, SAMPLES, ALPHA)


@pytest.mark.parametrize("spec", [HISTOGRAM, COUNT, SUM], ids=lambda s: s["query"])
def test_the_real_release_passes_and_half_the_noise_fails(spec: dict[str, Any]) -> None:
    plan = one_plan(spec, **SUBJECT)
    real = _run(plan, 1)
    assert real.passed, real
    # the bound is informative: above 0.4 of the claim (the worst set is a half-line)
    assert real.epsilon_lower_bound > 0.4 * plan.epsilon
    half = _run(plan, 2, broken=True)
    assert not half.passed and half.epsilon_lower_bound > plan.epsilon
    assert half.false_pass_bound is not None and half.false_pass_bound < 1e-9


def test_a_unit_over_two_cells_is_caught_at_half_noise_along_the_projection() -> None:
    plan = one_plan(SPREAD, **SUBJECT)
    assert _run(plan, 3).passed
    half = _run(plan, 4, broken=True)
    assert not half.passed
    assert half.worst_event is not None and "projection" in half.worst_event


def test_halving_the_noise_halves_every_noise_parameter() -> None:
    plan = one_plan(SUM, **SUBJECT)
    (total,) = plan.query.totals
    (broken,) = halve_noise(plan).query.totals
    assert broken.noise.t == total.noise.t / 2.0
    assert broken.sensitivity == total.sensitivity and broken.step == total.step


@pytest.mark.parametrize(
    "spec",
    [
        {**HISTOGRAM, "name": "mean", "query": "mean", "field": "latency", "bounds": [0, 100]},
        {
            **COUNT,
            "name": "selected",
            "group_by": [{"field": "version"}],
            "select_groups": True,
            "delta": 1e-6,
        },
        {
            "name": "density",
            "query": "density",
            "field": "latency",
            "bounds": [0, 100],
            "grid": [0, 25, 50, 75, 100],
            "bandwidth": 20,
            "epsilon": 1.0,
            "delta": 1e-6,
            "contribution": {"records_per_group": 2, "groups_per_subject": 1},
        },
    ],
    ids=lambda s: s["name"],
)
def test_means_selected_groups_and_densities_pass(spec: dict[str, Any]) -> None:
    plan = one_plan(spec, **SUBJECT)
    result = _run(plan, 5)
    assert result.passed, result
    assert result.claimed_delta == plan.delta


def test_only_counts_histograms_and_sums_get_a_half_noise_control() -> None:
    mean = {**SUM, "name": "m", "query": "mean"}
    selected = {**COUNT, "name": "sel", "group_by": [{"field": "version"}], "delta": 1e-6}
    selected["select_groups"] = True
    config = aggregates_config(HISTOGRAM, mean, selected, **SUBJECT)
    chosen = AggregateScenarios.of(config, None, None, SAMPLES)
    names = ["aggregate os_share", "aggregate m", "aggregate sel"]
    assert [s.name for s in chosen.audits] == names
    assert [s.name for s in chosen.controls] == ["aggregate os_share (half noise)"]
    for audit in chosen.audits[1:]:
        assert any("no half-noise control" in note for note in audit.notes)
    assert AggregateScenarios.of(config, None, ["os"], SAMPLES).audits == []


def _config_file(tmp_path: Path) -> Path:
    path = tmp_path / "aggregates.yaml"
    config = {
        "kafka": {"input_topic": "raw", "output_topic": "out", "dead_letter_topic": "dlq"},
        "privacy": {"epsilon": 10.0, "delta": 1e-4, "subject": "user"},
        "fields": FIELDS,
        "aggregates": [HISTOGRAM, SUM],
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_cli_audits_a_named_aggregate_with_the_production_noise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # os.urandom noise here: a false failure has probability <= 1e-3 (the run's confidence)
    argv = ["audit", "--config", str(_config_file(tmp_path)), "--aggregate", "os_share"]
    code = main([*argv, "--aggregate-samples", "2000", "--no-self-check"])
    out, err = capsys.readouterr()
    assert code == 0, out
    assert "aggregate os_share" in out and "aggregate latency_sum" not in out
    # no field nor record audited when only --aggregate is given
    assert "randomized_response" not in out and "record (all fields)" not in out
    assert "6000 aggregate releases" in out  # 2 windows x (1000 pilot + 2000 counted)
    assert "privstream audit: aggregate os_share:" in err


@pytest.mark.parametrize("extra", [["--aggregate", "nope"], ["--aggregate-samples", "10"]])
def test_cli_aggregate_usage_errors_exit_2(
    extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["audit", "--config", str(_config_file(tmp_path)), "--no-self-check", *extra]
    assert main(argv) == 2
    assert "privstream: audit: --aggregate" in capsys.readouterr().err

"""``integer`` fields on the real menu (issue 35, item 2): the integer is a real in its
bounds, the output a real; ``mechanism: auto`` picks between discrete Laplace and the
local mechanisms by the least regret over every data spread."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from privstream.audit import audit
from privstream.audit.by_kind import audit_width, target_for
from privstream.cli.main import main
from privstream.cli.metadata import sidecar_path, write_sidecar
from privstream.cli.sanitize import sanitize_stream
from privstream.config import Guarantee, parse_config
from privstream.config.fields import IntegerField
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.kinds.auto_real import auto_real_choice, real_regrets
from privstream.kinds.registry import registration_of
from privstream.mechanisms.integer_laplace import IntegerLaplaceMechanism
from privstream.mechanisms.three_outputs import ThreeOutputsMechanism
from privstream.pipeline.avro_schema import output_schema
from privstream.pipeline.json_schema_output import output_json_schema
from privstream.pipeline.protobuf_output import output_proto
from privstream.testing import SeededSource

from tests.support.configs import config_dict


def _field(**extra: Any) -> dict[str, Any]:
    return {"name": "n", "kind": "integer", "bounds": [30, 220], "epsilon": 1.0, **extra}


def _spec(**extra: Any) -> IntegerField:
    return IntegerField.model_validate(_field(**extra))


@pytest.mark.parametrize(
    ("bounds", "epsilon", "chosen"),
    [
        ([30, 220], 0.5, "hybrid"),
        ([30, 220], 1.0, "three_outputs"),
        ([0, 10], 8.0, "pm_sub"),
        # two values at eps 8: discrete Laplace's rare +-1 beats every local mechanism
        ([0, 1], 8.0, "discrete_laplace"),
    ],
)
def test_auto_picks_by_the_least_regret_with_discrete_laplace_as_a_candidate(
    bounds: list[int], epsilon: float, chosen: str
) -> None:
    spec, share = _spec(bounds=bounds, epsilon=epsilon, mechanism="auto"), Guarantee(epsilon, 0.0)
    choice = auto_real_choice(spec, share)
    assert choice.mechanism == chosen
    regret = real_regrets(spec, share)
    assert set(regret) == {"discrete_laplace", "piecewise", "hybrid", "pm_sub", "duchi",
                           "three_outputs"}  # fmt: skip
    assert regret[chosen] == min(regret.values())
    # discrete Laplace's law is flat: its variance in units of half the range, squared
    laplace = IntegerLaplaceMechanism(bounds=(bounds[0], bounds[1]), epsilon=epsilon)
    half = (bounds[1] - bounds[0]) / 2
    assert laplace.variance_law().constant == pytest.approx(laplace.noise.variance / half**2)


def test_the_issues_gap_closes_at_eps_one_and_eight() -> None:
    """Discrete Laplace alone has ~2x the regret of auto's choice at eps 1, ~20x at eps 8."""
    for epsilon, low, high in ((1.0, 1.7, 2.0), (8.0, 15.0, 25.0)):
        spec = _spec(bounds=[0, 100], epsilon=epsilon, mechanism="auto")
        regret = real_regrets(spec, Guarantee(epsilon, 0.0))
        assert low <= regret["discrete_laplace"] / min(regret.values()) <= high


def test_the_release_is_a_real_of_the_mechanisms_output_set_and_its_id_is_the_choices() -> None:
    (auto,) = build_plan(parse_config(config_dict([_field(mechanism="auto")]))).fields
    (named,) = build_plan(parse_config(config_dict([_field(mechanism="three_outputs")]))).fields
    assert auto.release_id == named.release_id and auto.mechanism == "three_outputs"
    mech = auto.handler.mechanism
    assert isinstance(mech, ThreeOutputsMechanism) and (mech.lower, mech.upper) == (30.0, 220.0)
    parsed = [auto.handler.parse(v) for v in [30, 125, 220, 500, -7, 99.5] * 100]
    values = auto.handler.release(parsed, SeededSource(4)).values
    c = mech.law.magnitude * mech.half
    assert set(np.round(values, 6).tolist()) <= {round(125 - c, 6), 125.0, round(125 + c, 6)}
    (default,) = build_plan(parse_config(config_dict([_field()]))).fields
    assert default.mechanism == "discrete_laplace"  # the default is unchanged: ids kept


def test_local_mechanisms_refuse_delta_and_integers_are_never_memoized() -> None:
    with pytest.raises(ConfigError, match="three_outputs is pure epsilon-DP"):
        parse_config(config_dict([_field(mechanism="three_outputs", delta=1e-6)], delta=1e-5))
    with pytest.raises(ConfigError, match="memo_identity"):
        parse_config(config_dict([_field(mechanism="auto", memo_identity="message_key")]))
    for mechanism in ("discrete_laplace", "piecewise", "three_outputs"):
        assert registration_of(_spec(mechanism=mechanism)).memo is None


def test_output_schemas_hold_a_real_on_the_real_menu_and_an_integer_otherwise() -> None:
    """Avro, JSON Schema and Protobuf: ``n`` (auto: three_outputs) a double, ``m`` an integer."""
    config = parse_config(config_dict([_field(mechanism="auto"), _field(name="m")]))
    plan = build_plan(config)
    avro = {f["name"]: f["type"] for f in output_schema(config.fields, plan)["fields"]}
    assert avro["n"] == "double" and avro["m"] == "long"
    json_schema = output_json_schema(config.fields, plan)["properties"]
    assert json_schema["n"]["type"] == "number" and json_schema["m"]["type"] == "integer"
    proto = output_proto(config.fields, plan).text
    assert re.search(r"double n = \d+;", proto) and re.search(r"int64 m = \d+;", proto), proto


def test_explain_shows_the_choice_and_warns_a_default_field_where_the_menu_wins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    fields = [_field(), _field(name="a", mechanism="auto")]
    path.write_text(yaml.safe_dump(config_dict(fields)), encoding="utf-8")
    assert main(["explain", "--config", str(path), "--format", "json"]) == 0
    shown = {f["name"]: f for f in json.loads(capsys.readouterr().out)["fields"]}
    assert shown["a"]["mechanism"] == "three_outputs"
    assert shown["n"]["auto"]["chosen"] == "three_outputs"
    assert "discrete_laplace has up to 1.87x" in shown["n"]["auto_warning"]
    assert "write mechanism: auto" in shown["n"]["auto_warning"]


def test_estimate_and_audit_of_an_integer_on_the_real_menu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    text = yaml.safe_dump(config_dict([_field(mechanism="auto")]))
    config.write_text(text, encoding="utf-8")
    parsed = parse_config(yaml.safe_load(text))
    plan = build_plan(parsed)
    values = np.random.default_rng(35).integers(40, 200, size=8000)
    lines = [json.dumps({"n": int(v)}).encode() for v in values]
    out = io.BytesIO()
    sanitize_stream(plan, lines, out, str(tmp_path / "dead.jsonl"), SeededSource(5))
    (tmp_path / "clean.jsonl").write_bytes(out.getvalue())
    write_sidecar(sidecar_path(str(tmp_path / "clean.jsonl")), plan, len(lines))
    args = ["estimate", "--config", str(config), "--input", str(tmp_path / "clean.jsonl")]
    assert main([*args, "--format", "json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["fields"]
    assert entry["mechanism"] == "three_outputs" and entry["records"] == 8000
    # 5 standard errors: false failure below 6e-7 for a random seed
    assert abs(entry["mean"]["estimate"] - float(values.mean())) < 5 * entry["mean"]["stderr"]
    assert target_for(plan.fields[0]).inputs == (30.0, 220.0)
    assert audit_width(plan.fields[0]) == 2
    (result,) = audit(parsed, plan, samples=10_000, self_check=False).fields
    assert result.passed and result.epsilon_lower_bound > 0.5 * result.claimed_epsilon

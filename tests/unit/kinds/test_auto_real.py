"""``mechanism: auto`` for real fields: the least regret over every data spread, and why."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from privstream.cli.main import main
from privstream.config import Guarantee, parse_config
from privstream.config.fields import RealField
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.kinds.auto_real import auto_real_choice, explain_auto_real, real_regrets
from privstream.mechanisms.three_outputs import ThreeOutputsMechanism, zero_share

from tests.support.configs import config_dict, laplace_tight_scale


def real(**extra: Any) -> RealField:
    return RealField.model_validate({"name": "x", "kind": "real", "bounds": [0, 100], **extra})


def share(epsilon: float, delta: float = 0.0) -> Guarantee:
    return Guarantee(epsilon=epsilon, delta=delta)


def pm_paper(epsilon: float) -> float:
    """Wang et al. 2019, worst-case PM variance for t in [-1, 1]."""
    a = math.exp(epsilon / 2.0)
    return 4.0 * a / (3.0 * (a - 1.0) ** 2)


def hm_paper(epsilon: float) -> float:
    """Wang et al. 2019, Lemma 4 (eps > eps*)."""
    a, e = math.exp(epsilon / 2.0), math.exp(epsilon)
    return (a + 3.0) / (3.0 * a * (a - 1.0)) + (e + 1.0) ** 2 / (a * (e - 1.0) ** 2)


def pm_sub_paper(epsilon: float, t: float) -> float:
    """Zhao et al. 2020, PM-SUB: uniform on [L, R] w.p. e^eps / (e^(eps/3) + e^eps), else on
    the rest of [-A, A]; the variance from the two pieces' second moments."""
    e, e3 = math.exp(epsilon), math.exp(epsilon / 3.0)
    half = (e + e3) / (e3 * (e - 1.0))
    a = (e + e3) * (e3 + 1.0) / (e3 * (e - 1.0))
    left, right = half * (t * e3 - 1.0), half * (t * e3 + 1.0)
    cubes = right**3 - left**3
    inside = cubes / (3.0 * (right - left))
    outside = (2.0 * a**3 - cubes) / (3.0 * (2.0 * a - (right - left)))
    p_in = e / (e3 + e)
    return p_in * inside + (1.0 - p_in) * outside - t * t


def three_outputs_paper(epsilon: float, p: float) -> tuple[float, float]:
    """Zhao et al. 2020, Three-Outputs at P(0 | 0) = p: ``Var[y | t] = C^2 (1 - P(0 | t)) - t^2``
    with ``P(0 | t) = p - p (1 - e^-eps) |t|``: the constant and the ``|t|`` coefficient."""
    e = math.exp(epsilon)
    c = e * (e + 1.0) / ((e - 1.0) * (e - p))
    return c * c * (1.0 - p), c * c * p * (1.0 - 1.0 / e)


def paper_laws(epsilon: float) -> dict[str, Callable[[float, float], float]]:
    """Mean variance of one report over data with mean |t| = m1 and mean t^2 = m2: Laplace
    (b = 2 / eps), PM, HM (Wang et al. 2019), PM-SUB (Zhao et al. 2020; linear in t^2),
    Duchi et al. and Three-Outputs (Zhao et al. 2020; at the p the mechanism chose)."""
    a, e = math.exp(epsilon / 2.0), math.exp(epsilon)
    mix = 1.0 - 1.0 / a if epsilon > 0.61 else 0.0  # HM: PM with this probability, else Duchi
    sub0, sub1 = pm_sub_paper(epsilon, 0.0), pm_sub_paper(epsilon, 1.0)

    def pm(q: float) -> float:
        return q / (a - 1.0) + (a + 3.0) / (3.0 * (a - 1.0) ** 2)

    def duchi(q: float) -> float:
        return ((e + 1.0) / (e - 1.0)) ** 2 - q

    def hm(q: float) -> float:
        return mix * pm(q) + (1.0 - mix) * duchi(q)

    three_c, three_u = three_outputs_paper(epsilon, zero_share(epsilon))
    return {
        "laplace": lambda m1, m2: 8.0 / epsilon**2,
        "piecewise": lambda m1, m2: pm(m2),
        "hybrid": lambda m1, m2: hm(m2),
        "pm_sub": lambda m1, m2: sub0 + (sub1 - sub0) * m2,
        "duchi": lambda m1, m2: duchi(m2),
        "three_outputs": lambda m1, m2: three_c + three_u * m1 - m2,
    }


@pytest.mark.parametrize(
    ("epsilon", "chosen"),
    [(0.5, "hybrid"), (1.0, "three_outputs"), (2.0, "three_outputs"), (4.0, "pm_sub")],
)
def test_the_worst_cases_are_the_papers_and_the_choice_minimises_the_regret(
    epsilon: float, chosen: str
) -> None:
    choice = auto_real_choice(real(epsilon=epsilon), share(epsilon))
    assert choice.mechanism == chosen
    assert choice.restricted is None
    variances = choice.variances
    # in t units (half-width 50): Laplace 2 b^2 with b = 2 / eps, i.e. 8 / eps^2
    scale = 50.0**2 / choice.n
    assert variances["laplace"] == pytest.approx(8.0 / epsilon**2 * scale, rel=1e-3)
    assert variances["piecewise"] == pytest.approx(pm_paper(epsilon) * scale, rel=0.01)
    if epsilon > 0.61:
        assert variances["hybrid"] == pytest.approx(hm_paper(epsilon) * scale, rel=0.01)
    assert variances["hybrid"] < variances["piecewise"] < variances["laplace"]
    # the regret recomputed from the papers' laws on a fine grid of data at one |t| = a
    regret = real_regrets(real(epsilon=epsilon), share(epsilon))
    laws = paper_laws(epsilon)
    points = [i / 2000 for i in range(2001)]
    best = [min(law(a, a * a) for law in laws.values()) for a in points]
    for name, law in laws.items():
        worst = max(law(a, a * a) / b for a, b in zip(points, best, strict=True))
        assert regret[name] == pytest.approx(worst, rel=0.02), name


def test_laplace_keeps_its_place_where_delta_pays_for_it_and_says_why() -> None:
    """Tight calibration at delta 0.5: b = 2 / (0.5 + 2 ln 2), variance 2 b^2 = 2.25 < HM's 16.7."""
    choice = auto_real_choice(real(epsilon=0.5, delta=0.5), share(0.5, 0.5))
    assert choice.mechanism == "laplace"
    b = laplace_tight_scale(2.0, 0.5, 0.5)
    assert choice.variances["laplace"] == pytest.approx(2.0 * b * b * 50.0**2 / choice.n, rel=1e-3)
    assert choice.restricted is not None and "delta 0.5" in choice.restricted


def test_the_thesis_calibration_is_the_laplace_candidate_when_declared() -> None:
    tight = auto_real_choice(real(epsilon=0.5, delta=0.5), share(0.5, 0.5))
    thesis = auto_real_choice(real(epsilon=0.5, delta=0.5, calibration="thesis"), share(0.5, 0.5))
    assert thesis.variances["laplace"] > tight.variances["laplace"]  # thesis adds more noise


def test_the_choice_depends_on_the_budget_only_not_on_the_bounds() -> None:
    for epsilon, delta in [(0.3, 0.0), (1.0, 1e-6), (3.0, 0.0), (0.5, 0.4)]:
        picks = {
            auto_real_choice(
                RealField.model_validate(
                    {"name": "x", "kind": "real", "bounds": bounds, "epsilon": epsilon}
                ),
                share(epsilon, delta),
            ).mechanism
            for bounds in ([0, 1], [-20, 60], [1000, 5000])
        }
        assert len(picks) == 1, (epsilon, delta, picks)


def test_a_real_field_without_mechanism_is_released_by_the_choice() -> None:
    written = {"name": "x", "kind": "real", "bounds": [0, 100], "epsilon": 1.0}
    (auto,) = build_plan(parse_config(config_dict([written]))).fields
    assert isinstance(auto.handler.mechanism, ThreeOutputsMechanism)
    explicit = {**written, "mechanism": "three_outputs"}
    (named,) = build_plan(parse_config(config_dict([explicit]))).fields
    # the release id names the chosen mechanism: auto and an explicit choice are one release
    assert auto.release_id == named.release_id


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"mechanism": "piecewise", "delta": 1e-6}, "piecewise is pure epsilon-DP"),
        ({"mechanism": "hybrid", "calibration": "thesis"}, "does not apply to hybrid"),
    ],
)
def test_explicit_local_mechanisms_refuse_what_they_do_not_use(
    extra: dict[str, Any], message: str
) -> None:
    field = {"name": "x", "kind": "real", "bounds": [0, 1], "epsilon": 1.0, **extra}
    with pytest.raises(ConfigError, match=message):
        parse_config(config_dict([field], delta=1e-3))


CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 3, delta: 0.5}
fields:
  - {name: a, kind: real, bounds: [0, 10], epsilon: 1}
  - {name: b, kind: real, bounds: [0, 10], epsilon: 1, mechanism: laplace}
  - {name: c, kind: real, bounds: [0, 10], epsilon: 0.5, delta: 0.5}
"""


def test_explain_shows_the_candidates_and_warns_of_a_losing_declaration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG)
    assert main(["explain", "--config", str(path), "--format", "json"]) == 0
    fields = {f["name"]: f for f in json.loads(capsys.readouterr().out)["fields"]}
    a, b, c = fields["a"], fields["b"], fields["c"]
    assert a["mechanism"] == "three_outputs" and a["auto"]["chosen"] == "three_outputs"
    assert set(a["auto"]["candidate_variances"]) == {
        "laplace",
        "piecewise",
        "hybrid",
        "pm_sub",
        "duchi",
        "three_outputs",
    }
    assert a["auto"]["rule"] == "least regret over every data spread"
    assert a["auto_warning"] is None
    # laplace at eps 1 has 8 / 4.29 = 1.87x hybrid's variance at the bounds: past 1.5x
    assert b["auto_warning"] is not None and "laplace has up to 1.8" in b["auto_warning"]
    assert c["mechanism"] == "laplace" and "spends delta" in c["auto"]["restricted"]
    assert main(["explain", "--config", str(path)]) == 0
    table = capsys.readouterr().out
    assert "auto: a uses three_outputs" in table
    assert "auto: c uses laplace" in table and "WARNING: b: laplace" in table


@pytest.mark.parametrize(
    ("spread", "epsilon", "chosen"),
    [
        ("near_bounds", 0.5, "hybrid"),  # Duchi alone either way: the tie goes to hybrid
        ("near_bounds", 2.0, "duchi"),
        ("wide", 1.0, "pm_sub"),
        ("wide", 4.0, "pm_sub"),
    ],
)
def test_a_declared_spread_picks_the_least_variance_there(
    spread: str, epsilon: float, chosen: str
) -> None:
    moments = {"wide": (0.5, 1.0 / 3.0), "near_bounds": (1.0, 1.0)}[spread]
    choice = auto_real_choice(real(epsilon=epsilon, spread=spread), share(epsilon))
    assert choice.mechanism == chosen
    laws = paper_laws(epsilon)
    at_q = {name: law(*moments) for name, law in laws.items()}
    assert at_q[chosen] == pytest.approx(min(at_q.values()), rel=0.01)
    entry = explain_auto_real(real(epsilon=epsilon, spread=spread), share(epsilon), 1.5)["auto"]
    assert entry["chosen"] == chosen and f"at spread {spread}" in entry["rule"]


def test_spread_is_refused_beside_a_declared_mechanism_and_keeps_release_ids() -> None:
    field = {"name": "x", "kind": "real", "bounds": [0, 1], "epsilon": 2.0}
    with pytest.raises(ConfigError, match="spread 'wide' guides mechanism: auto only"):
        parse_config(config_dict([{**field, "mechanism": "piecewise", "spread": "wide"}]))
    (declared,) = build_plan(parse_config(config_dict([{**field, "spread": "near_bounds"}]))).fields
    (plain,) = build_plan(parse_config(config_dict([{**field, "mechanism": "duchi"}]))).fields
    assert declared.mechanism == plain.mechanism == "duchi"
    # spread is in the id when declared (the config changed), absent at its default
    assert declared.release_id != plain.release_id

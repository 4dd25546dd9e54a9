"""The ordinal exponential mechanism samples exactly the counts it certifies (issue 29, part 2).

A row of word counts ``c_i(j)`` holds integers on both sides of ``2^63`` at
large epsilon; numpy converted such a row to float64 before summing it, so the
sampling thresholds were off by up to 2^11 words (k = 5 at epsilon 36.25
realised 36.74) and from epsilon ~38 the constructor raised ``OverflowError``.
Here the law is read back from the thresholds ``release`` searches and checked
against the certified counts and the bound, written from the definition.
"""

from __future__ import annotations

import itertools
from decimal import Decimal, localcontext
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from privstream.cli.main import main
from privstream.config import parse_config
from privstream.errors import MechanismError
from privstream.kinds import build_plan
from privstream.mechanisms.exponential import OrdinalExponential

from tests.support.configs import config_dict

SIZES = (2, 3, 4, 5, 6, 7, 8, 48, 256)
#: 20-46 in steps of 0.25 (the red team's 384-config range), plus small and huge epsilons
EPSILONS = (0.5, 2.0, 8.0, *(20.0 + 0.25 * s for s in range(105)), 60.0, 300.0, 1e6)
#: the large domains take ~0.3 s a construction (O(k^2) bisection): 20-46 in steps of 1.25
COARSE = (0.5, 8.0, *EPSILONS[3:108:5], 1e6)


def exp_at_least(x: float) -> Fraction:
    """``e^x`` rounded up to a rational (70 digits, a unit of the last one added)."""
    with localcontext() as ctx:
        ctx.prec = 70
        return Fraction(Decimal(x).exp()) * (1 + Fraction(1, 10**60))


def sampled_counts(mech: OrdinalExponential) -> list[list[int]]:
    """Words per answer as ``release`` samples them: differences of its thresholds."""
    rows = []
    for row in mech._thresholds.tolist():
        bounds = [0, *(int(t) for t in row), 2**64]
        rows.append([b - a for a, b in itertools.pairwise(bounds)])
    return rows


@pytest.mark.parametrize("k", SIZES)
def test_the_sampled_thresholds_are_the_certified_counts_and_within_the_bound(k: int) -> None:
    for eps in EPSILONS if k <= 8 else COARSE:
        try:
            mech = OrdinalExponential(domain=list(range(k)), epsilon=eps)
        except MechanismError:  # a refusal is allowed; any other exception fails the test
            continue
        counts = sampled_counts(mech)
        assert counts == mech._counts, (k, eps)
        assert all(sum(row) == 2**64 for row in counts)
        bound = exp_at_least(eps)
        for column in zip(*counts, strict=True):
            assert min(column) >= 1
            assert Fraction(max(column), min(column)) <= bound, (k, eps)
        assert np.array_equal(mech.law, np.array(counts, dtype=np.float64) / 2.0**64)


def test_the_red_teams_worst_case_realises_at_most_its_epsilon() -> None:
    mech = OrdinalExponential(domain=list(range(5)), epsilon=36.25)
    counts = sampled_counts(mech)
    worst = max(Fraction(max(c), min(c)) for c in zip(*counts, strict=True))
    assert worst <= exp_at_least(36.25)  # the float64 sums realised e^36.74


def _field(eps: float, k: int) -> dict[str, object]:
    domain = [str(v) for v in range(k)]
    return {"name": "r", "kind": "categorical", "mechanism": "exponential", "domain": domain,
            "epsilon": eps}  # fmt: skip


@pytest.mark.parametrize("eps", [38.0, 45.0, 1000.0])
def test_large_epsilons_load_plan_and_explain(
    eps: float, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = build_plan(parse_config(config_dict([_field(eps, 5)], epsilon=eps)))
    (planned,) = plan.fields
    assert isinstance(planned.handler.mechanism, OrdinalExponential)
    path = tmp_path / "c.yaml"
    path.write_text(
        "kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}\n"
        f"privacy: {{epsilon: {eps}}}\nfields:\n  - {{name: r, kind: categorical, "
        f"mechanism: exponential, domain: [a, b, c, d, e], epsilon: {eps}}}\n",
        encoding="utf-8",
    )
    assert main(["explain", "--config", str(path), "--format", "json"]) == 0
    assert '"exponential"' in capsys.readouterr().out


def test_a_refusal_is_a_clean_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    domain = ", ".join(f"v{i}" for i in range(300))
    path.write_text(
        "kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}\n"
        "privacy: {epsilon: 40}\nfields:\n  - {name: r, kind: categorical, "
        f"mechanism: exponential, domain: [{domain}], epsilon: 40}}\n",
        encoding="utf-8",
    )
    with pytest.raises(SystemExit) as exited:
        main(["explain", "--config", str(path)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "at most 256" in err and "Traceback" not in err

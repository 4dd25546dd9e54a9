"""``bench/mean_laws.py``: its moments are exact and its exit status is its worst cell."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import integrate, stats

from bench.mean_laws import FIVE, MORE, beta, menu_laws, minimax, ratios

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("a", "b"), [(20.0, 20.0), (2.0, 5.0), (0.3, 6.0), (0.5, 0.5)])
def test_beta_moments_match_quadrature(a: float, b: float) -> None:
    """The incomplete-beta closed form against numerical integration of |2x - 1| and
    (2x - 1)^2 under the Beta density (split at 1/2, where |t| has its kink)."""
    pdf = stats.beta(a, b).pdf
    mean_abs = sum(
        integrate.quad(lambda x: abs(2 * x - 1) * pdf(x), lo, hi)[0]
        for lo, hi in ((0.0, 0.5), (0.5, 1.0))
    )
    mean_square = integrate.quad(lambda x: (2 * x - 1) ** 2 * pdf(x), 0.0, 1.0)[0]
    assert beta(a, b) == pytest.approx((mean_abs, mean_square), rel=1e-6)


@pytest.mark.parametrize("eps", [0.5, 3.0, 8.0])
def test_each_shape_has_a_best_mechanism_and_the_minimax_is_least_worst(eps: float) -> None:
    table = ratios(menu_laws(eps), {**FIVE, **MORE})
    for shape in {**FIVE, **MORE}:
        assert min(row[shape] for row in table.values()) == 1.0
    worst = {name: max(row.values()) for name, row in table.items()}
    assert worst[minimax(table)] == min(worst.values())


def test_the_script_runs_and_exits_by_its_worst_cell() -> None:
    """Exit 1 exactly when the printed worst five-shape cell is above the 1.1x target."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "mean_laws.py")],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    found = re.search(r"worst five-shape cell: ([0-9.]+)x", run.stdout)
    assert found is not None, run.stderr
    assert run.returncode == (1 if float(found.group(1)) > 1.1 else 0)
    assert run.stdout.count("\n| ") >= 2 * 18  # a row per epsilon in both tables

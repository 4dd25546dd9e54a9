"""``auto``'s real-field choice against the best data-blind choice, by the exact laws alone.

No draws: every mechanism of ``auto``'s real-field menu (``CANDIDATES`` of
``privstream.kinds.auto_real``) states its variance law ``Var[y | t] = s
t^2 + u |t| + c`` (``VarianceLaw``), so its expected squared error of the
mean on data of known ``E|t|`` and ``E t^2`` is exact (``law.mean``). A
*data-blind choice* at an epsilon is one menu mechanism picked without
seeing the data; its *ratio* on a shape is its law over the least law of any
menu mechanism on that shape, and the *best* data-blind choice is the
minimax one: the least worst ratio over ``bench/mean_shapes.py``'s five
shapes. Per cell: ``auto``'s law over the best data-blind choice's law, and
per epsilon ``auto``'s worst ratio over the minimax one. Beside them,
``auto``'s ratio on Beta(a, b) shapes and point masses (its regret across
spreads) and the minimax choice over all the shapes here. Exit status 1 if
a five-shape cell is above 1.1x.
"""

from __future__ import annotations

import sys
from pathlib import Path

from scipy.special import betainc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from privstream.config import Guarantee  # noqa: E402
from privstream.config.fields import RealField  # noqa: E402
from privstream.errors import MechanismError  # noqa: E402
from privstream.kinds.auto_real import CANDIDATES, auto_real_choice  # noqa: E402
from privstream.kinds.real_ldp import MECHANISMS  # noqa: E402
from privstream.mechanisms.laplace import LaplaceMechanism  # noqa: E402
from privstream.mechanisms.variance_law import VarianceLaw  # noqa: E402

EPSILONS = (
    0.1,
    0.2,
    0.3,
    0.5,
    0.6,
    0.7,
    0.8,
    1.0,
    1.25,
    1.5,
    2.0,
    2.5,
    3.0,
    3.5,
    4.0,
    5.0,
    6.0,
    8.0,
)
TARGET = 1.1
BOUNDS = (0.0, 100.0)
#: a shape by the two moments the laws need: ``(E|t|, E t^2)`` of ``t = 2 x - 1``
Moments = tuple[float, float]


def beta(a: float, b: float) -> Moments:
    """``(E|t|, E t^2)`` of ``t = 2 x - 1``, ``x ~ Beta(a, b)``, exactly: ``E|t| = E t + 2 E[(1
    - 2x) 1{x < 1/2}]`` and ``E[x 1{x < c}] = E x I_c(a + 1, b)`` (regularized incomplete beta)."""
    mean = a / (a + b)
    square = a * (a + 1) / ((a + b) * (a + b + 1))
    below = float(betainc(a, b, 0.5)) - 2.0 * mean * float(betainc(a + 1, b, 0.5))
    return 2.0 * mean - 1.0 + 2.0 * below, 4.0 * square - 4.0 * mean + 1.0


#: ``bench/mean_shapes.py``'s five shapes (bimodal: 0 or 100 exactly, so ``|t| = 1``)
FIVE: dict[str, Moments] = {
    "centre": beta(20.0, 20.0),
    "uniform": beta(1.0, 1.0),
    "skewed": beta(2.0, 5.0),
    "near_bound": beta(0.3, 6.0),
    "bimodal": (1.0, 1.0),
}
#: beyond the five: Beta spreads from the centre to both bounds, then all values at one ``|t| = a``
MORE: dict[str, Moments] = {
    **{f"Beta({a:g},{a:g})": beta(a, a) for a in (100.0, 5.0, 2.0, 0.5, 0.2, 0.05)},
    **{f"Beta({a:g},{b:g})": beta(a, b) for a, b in ((1.0, 3.0), (0.5, 5.0), (0.1, 2.0))},
    **{f"mass at a = {a:g}": (a, a * a) for a in (0.0, 0.25, 0.5, 0.75, 0.9, 1.0)},
}


def menu_laws(eps: float) -> dict[str, VarianceLaw]:
    """Each menu mechanism's law at ``eps`` (delta 0), those that run there."""
    laws = {"laplace": LaplaceMechanism(bounds=BOUNDS, epsilon=eps).variance_law()}
    for name in CANDIDATES[1:]:
        try:
            laws[name] = MECHANISMS[name](bounds=BOUNDS, epsilon=eps).variance_law()
        except MechanismError:  # an epsilon too small for its thresholds: auto skips it too
            continue
    return laws


def ratios(laws: dict[str, VarianceLaw], shapes: dict[str, Moments]) -> dict[str, dict[str, float]]:
    """Per mechanism and shape: its law over the least menu law on that shape."""
    out: dict[str, dict[str, float]] = {name: {} for name in laws}
    for shape, moments in shapes.items():
        at = {name: law.mean(*moments) for name, law in laws.items()}
        least = min(at.values())
        for name, value in at.items():
            out[name][shape] = value / least
    return out


def minimax(table: dict[str, dict[str, float]]) -> str:
    """The data-blind choice of least worst ratio (ties: the first of the menu)."""
    return min(table, key=lambda name: max(table[name].values()))


def auto_at(eps: float) -> str:
    """What ``mechanism: auto`` gives a real field on ``BOUNDS`` at ``eps`` (delta 0)."""
    spec = RealField.model_validate(
        {"name": "x", "kind": "real", "bounds": list(BOUNDS), "epsilon": eps}
    )
    return auto_real_choice(spec, Guarantee(epsilon=eps, delta=0.0)).mechanism


def five_row(eps: float) -> tuple[str, list[float], float]:
    """One epsilon's row: the cells, and auto's worst ratio over the minimax one's."""
    table = ratios(menu_laws(eps), FIVE)
    chosen, best = auto_at(eps), minimax(table)
    cells = [table[chosen][s] / table[best][s] for s in FIVE]
    regret = max(table[chosen].values()) / max(table[best].values())
    head = f"| {eps:g} | {chosen} | {best} ({max(table[best].values()):.3f}x) "
    return (
        head + "| " + " | ".join(f"{c:.3f}x" for c in cells) + f" | {regret:.3f}x |",
        cells,
        regret,
    )


def more_row(eps: float) -> tuple[str, float]:
    """Auto's ratio per shape beyond the five, and the minimax over all shapes here."""
    laws = menu_laws(eps)
    own = ratios(laws, MORE)[auto_at(eps)]
    best = minimax(ratios(laws, FIVE | MORE))
    cells = " | ".join(f"{own[s]:.2f}x" for s in MORE)
    return f"| {eps:g} | {best} | {cells} |", max(own.values())


def main() -> int:
    print("## five shapes: auto's law / the best data-blind choice's law (minimax over the five)")
    print(
        "| eps | auto | best data-blind (its worst ratio) | "
        + " | ".join(FIVE)
        + " | worst / minimax |"
    )
    print("|---|---|---|" + "---|" * (len(FIVE) + 1))
    worst = 0.0
    for eps in EPSILONS:
        line, cells, regret = five_row(eps)
        worst = max(worst, regret, *cells)
        print(line)
    print("\n## beyond the five: auto's law / the least menu law on that data (its regret)")
    print("| eps | minimax over all shapes | " + " | ".join(MORE) + " |")
    print("|---|---|" + "---|" * len(MORE))
    spread = 0.0
    for eps in EPSILONS:
        line, own = more_row(eps)
        spread = max(spread, own)
        print(line)
    print(f"\nworst five-shape cell: {worst:.3f}x (target <= {TARGET:g}x); beyond: {spread:.3f}x")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())

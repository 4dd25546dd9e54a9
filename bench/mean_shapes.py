"""Means over five data shapes: privstream's real-field mechanisms against numpy anchors.

Whole processes, as ``bench/utility.py`` runs them (``privstream_run``:
``sanitize`` then ``estimate --truth``), one field per repetition and per
mechanism over the same columns: ``auto`` (what a field without
``mechanism:`` gets) and each mechanism named by ``--mechanisms``
(default: ``duchi``). Data on ``[0, 100]``, n = 10,000 per repetition:

* ``centre``: Beta(20, 20), values near the middle (``t^2`` ~ 0.02);
* ``uniform``: U(0, 100) (``t^2`` = 1/3);
* ``skewed``: Beta(2, 5), ``bench/utility.py``'s mean data;
* ``near_bound``: Beta(0.3, 6), values bunched at the lower bound;
* ``bimodal``: 0 or 100 exactly, 30% / 70% (``t^2`` = 1).

Anchors: numpy Duchi, PM and HM (``bench/ldp_anchors.py``), PM-SUB and
Three-Outputs (Zhao et al. 2020, here: ``pm_sub``, ``pm_sub_variance``,
``three_outputs_variance``) on the same data;
reported is each privstream mechanism's measured MSE over the least *exact*
expected MSE of the four on that very data (``exact_mean_mse``, free of the
anchors' draw noise), the best anchor's name, and the coverage
of privstream's 95% intervals; beside each measured ratio, in brackets, the
same ratio from the mechanism's own variance law on the data (no draw
noise; none for Laplace). Nothing is enforced: this records the table
of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from privstream.kinds.real_ldp import MECHANISMS  # noqa: E402

from bench.ldp_anchors import BEST_OF, Floats  # noqa: E402
from bench.utility import MEAN_N, UPPER, covered, exact_mean_mse, privstream_run  # noqa: E402

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
Shape = Callable[[np.random.Generator, tuple[int, int]], Floats]

SHAPES: dict[str, Shape] = {
    "centre": lambda rng, size: UPPER * rng.beta(20.0, 20.0, size=size),
    "uniform": lambda rng, size: UPPER * rng.random(size=size),
    "skewed": lambda rng, size: UPPER * rng.beta(2.0, 5.0, size=size),
    "near_bound": lambda rng, size: UPPER * rng.beta(0.3, 6.0, size=size),
    "bimodal": lambda rng, size: UPPER * (rng.random(size=size) < 0.7),
}


def pm_sub(t: Floats, eps: float, rng: np.random.Generator) -> Floats:
    """PM-SUB: uniform on [L, R] w.p. e^eps / (e^(eps/3) + e^eps), else on the rest of [-A, A]."""
    e, e3 = np.exp(eps), np.exp(eps / 3)
    half = (e + e3) / (e3 * (e - 1))
    a = (e + e3) * (e3 + 1) / (e3 * (e - 1))
    left, right = half * (t * e3 - 1), half * (t * e3 + 1)
    inside = rng.random(len(t)) < e / (e3 + e)
    centre = left + rng.random(len(t)) * (right - left)
    u = rng.random(len(t)) * (2 * a - (right - left))  # the two outer pieces
    outer = np.where(u < left + a, -a + u, right + (u - (left + a)))
    return np.where(inside, centre, outer)


def pm_sub_variance(t: Floats, eps: float) -> Floats:
    """``Var[y | t]`` of PM-SUB, exact, from the two uniform pieces' second moments."""
    e, e3 = np.exp(eps), np.exp(eps / 3)
    half = (e + e3) / (e3 * (e - 1))
    a = (e + e3) * (e3 + 1) / (e3 * (e - 1))
    left, right = half * (t * e3 - 1), half * (t * e3 + 1)
    cubes = right**3 - left**3
    second_in = cubes / (3 * (right - left))
    second_out = (2 * a**3 - cubes) / (3 * (2 * a - (right - left)))
    p_in = e / (e3 + e)
    result: Floats = p_in * second_in + (1 - p_in) * second_out - t**2
    return result


def three_outputs_variance(t: Floats, eps: float) -> Floats:
    """``Var[y | t]`` of Three-Outputs, the paper's law, at the ``P(0 | 0)`` of least
    worst-case variance (a grid of 4,096 shares below ``e^eps / (e^eps + 2)``)."""
    e = np.exp(eps)
    shares = np.linspace(0.0, e / (e + 2.0), 4097)[:-1]
    c2 = (e * (e + 1) / ((e - 1) * (e - shares))) ** 2
    constant, absolute = c2 * (1 - shares), c2 * shares * (1 - 1 / e)
    top = np.minimum(absolute / 2, 1.0)
    best = int(np.argmin(constant + absolute * top - top**2))
    result: Floats = constant[best] + absolute[best] * np.abs(t) - t**2
    return result


#: the anchors beyond ``bench/utility.py``'s three, by their exact ``Var[y | t]``
EXTRA_ANCHORS = {"PM-SUB": pm_sub_variance, "3-OUT": three_outputs_variance}


def exact_mse(name: str, data: Floats, eps: float) -> float:
    """``exact_mean_mse`` of ``bench/utility.py``, with PM-SUB and Three-Outputs beside it."""
    if name not in EXTRA_ANCHORS:
        return exact_mean_mse(name, data, eps)
    t = data / (UPPER / 2) - 1
    per_rep = EXTRA_ANCHORS[name](t, eps).mean(axis=1) / data.shape[1]
    return float((UPPER / 2) ** 2 * per_rep.mean())


def law_mse(name: str, data: Floats, eps: float) -> float:
    """The expected squared error of the mean by the mechanism's own variance law (nan: none)."""
    if name not in MECHANISMS:
        return float("nan")
    law = MECHANISMS[name](bounds=(0.0, UPPER), epsilon=eps).variance_law()
    t = data / (UPPER / 2) - 1
    per_rep = (law.square * t**2 + law.absolute * abs(t) + law.constant).mean(axis=1)
    per_rep /= data.shape[1]
    return float((UPPER / 2) ** 2 * per_rep.mean())


def shape_cell(
    work: Path, shape: str, eps: float, mechanisms: list[str], reps: int, seed: int
) -> dict[str, Any]:
    """One (shape, eps): privstream's MSE and coverage per mechanism, the exact best anchor."""
    rng = np.random.default_rng(seed)
    data = SHAPES[shape](rng, (reps, MEAN_N))
    truth = data.mean(axis=1)
    fields = [
        {"name": f"{m}{r}", "kind": "real", "bounds": [0.0, UPPER], "epsilon": eps}
        | ({} if m == "auto" else {"mechanism": m})
        for m in mechanisms
        for r in range(reps)
    ]
    lines = [
        orjson.dumps({f"{m}{r}": v for m in mechanisms for r, v in enumerate(row)})
        for row in data.T.tolist()
    ]
    report = {entry["name"]: entry for entry in privstream_run(work, fields, lines)}
    exact = {name: exact_mse(name, data, eps) for name in (*BEST_OF, *EXTRA_ANCHORS)}
    out: dict[str, Any] = {"exact": exact, "mechanisms": {}}
    for m in mechanisms:
        entries = [report[f"{m}{r}"] for r in range(reps)]
        est = np.array([e["mean"]["estimate"] for e in entries])
        hits = sum(covered(e["mean"]["ci"], truth[r]) for r, e in enumerate(entries))
        out["mechanisms"][m] = {
            "chosen": entries[0]["mechanism"],
            "mse": float(np.mean((est - truth) ** 2)),
            "law": law_mse(entries[0]["mechanism"], data, eps),
            "coverage": hits / reps,
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=100, help="repetitions per cell")
    parser.add_argument("--mechanisms", default="duchi", help="comma-separated, beside auto")
    parser.add_argument("--epsilons", default=",".join(f"{e:g}" for e in EPSILONS))
    args = parser.parse_args()
    mechanisms = ["auto", *args.mechanisms.split(",")]
    epsilons = [float(e) for e in args.epsilons.split(",")]
    print(f"## means: [0, {UPPER:g}], n = {MEAN_N:,}, {args.reps} repetitions per cell")
    print("| shape | eps | best anchor (exact) | "
          + " | ".join(f"{m} / best" for m in mechanisms) + " | coverage |")  # fmt: skip
    print("|---|---|---|" + "---|" * len(mechanisms) + "---|")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (shape, eps) in enumerate((s, e) for s in SHAPES for e in epsilons):
            work = Path(tmp) / f"cell{i}"  # sanitize refuses to overwrite a cell's sidecar
            work.mkdir()
            cell = shape_cell(work, shape, eps, mechanisms, args.reps, seed=3500 + i)
            name = min(cell["exact"], key=cell["exact"].__getitem__)
            low = cell["exact"][name]
            rows = cell["mechanisms"]
            ratios = " | ".join(
                f"{rows[m]['mse'] / low:.2f}x [{rows[m]['law'] / low:.2f}x]"
                + (f" ({rows[m]['chosen']})" if m == "auto" else "")
                for m in mechanisms
            )
            cover = " / ".join(f"{rows[m]['coverage']:.2f}" for m in mechanisms)
            print(f"| {shape} | {eps:g} | {name} | {ratios} | {cover} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

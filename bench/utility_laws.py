"""``auto``'s frequency choice by the exact laws alone, over the whole grid of ``bench/utility.py``.

No draws: for each truth, k and eps, the summed variance of the mechanism
``mechanism: auto`` chooses (privstream's own law, ``selection``) over the
least exact MSE of the numpy anchors (GRR, OUE, OLH, SS: any truth; HR: on
the population shares, Zipf(1.1) or uniform), and over the least of
``auto``'s own menu. ``bench/utility.py`` shows that the measured errors
follow these laws; this prints the cells it is too slow to measure. Exit
status 1 if a cell is above 1.05x the best anchor.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from privstream.mechanisms.selection import frequency_variances, least_variance  # noqa: E402

from bench.ldp_anchors import exact_mse, hr_mse, ss_size  # noqa: E402
from bench.utility import DOMAINS, FREQ_EPSILONS, FREQ_TARGET, TRUTHS, shares  # noqa: E402

SHORT = {
    "randomized_response": "RR",
    "local_hashing": "OLH",
    "subset_selection": "SS",
    "unary_encoding": "OUE",
}


def cell(truth: str, k: int, eps: float) -> tuple[str, float, float, str]:
    """``auto``'s choice, its law over the best anchor's and over its menu's best, that anchor."""
    menu = frequency_variances(k, eps, n=1)
    chosen = least_variance(menu)
    anchors = {p: exact_mse(p, k, eps, 1) for p in ("GRR", "OUE", "OLH")}
    if ss_size(k, eps) > 1:  # SS at d = 1 is GRR
        anchors["SS"] = exact_mse("SS", k, eps, 1)
    anchors["HR"] = hr_mse(shares(truth, k), eps, 1)
    best = min(anchors, key=anchors.__getitem__)
    return chosen, menu[chosen] / anchors[best], menu[chosen] / min(menu.values()), best


def main() -> int:
    worst = 0.0
    for truth in TRUTHS:
        print(f"\n## {truth}: auto's law / best anchor's exact MSE (auto's choice; best anchor)")
        print("| k | " + " | ".join(f"eps {e:g}" for e in FREQ_EPSILONS) + " |")
        print("|---|" + "---|" * len(FREQ_EPSILONS))
        for k in DOMAINS:
            row = []
            for eps in FREQ_EPSILONS:
                chosen, ratio, own, best = cell(truth, k, eps)
                worst = max(worst, ratio)
                menu = f", {own:.3f}x own menu" if own > 1 else ""
                row.append(f"{ratio:.3f}x ({SHORT[chosen]}; {best}{menu})")
            print(f"| {k:,} | " + " | ".join(row) + " |")
    print(f"\nworst cell: {worst:.3f}x (target <= {FREQ_TARGET:g}x)")
    return 0 if worst <= FREQ_TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Sampler throughput: the secure source against numpy's default generator.

Prints values/s for each and their ratio, measured in the same run (the
machines are shared and noisy: only the ratio means something).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable

import numpy as np

from service.mechanisms import LaplaceMechanism, OsEntropy, RandomizedResponse
from service.mechanisms.rng import NoiseSource

N = 1_000_000
REPEATS = 5


class NumpyDefault:
    """Baseline only: numpy's PCG64, NOT acceptable for production noise."""

    def __init__(self) -> None:
        self._gen = np.random.default_rng()

    def uniform(self, n: int) -> np.ndarray:
        return self._gen.random(n)


def best_rate(fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return N / best


def main() -> None:
    print(f"python {platform.python_version()}, numpy {np.__version__}, cpus {os.cpu_count()}")
    values = np.random.default_rng(1).uniform(0, 100, N)
    cats = np.random.default_rng(2).integers(0, 48, N)
    laplace = LaplaceMechanism(bounds=(0, 100), epsilon=1.0)
    rr = RandomizedResponse(domain=[f"c{i}" for i in range(48)], epsilon=1.0)
    cases: dict[str, Callable[[NoiseSource], object]] = {
        "uniform": lambda s: s.uniform(N),
        "laplace": lambda s: laplace.release(values, s),
        "randomized_response(48)": lambda s: rr.release(cats, s),
    }
    print(f"{'sampler':26} {'secure values/s':>16} {'numpy values/s':>16} {'ratio':>7}")
    for name, case in cases.items():
        secure = best_rate(lambda case=case: case(OsEntropy()))
        baseline = best_rate(lambda case=case: case(NumpyDefault()))
        print(f"{name:26} {secure:16,.0f} {baseline:16,.0f} {secure / baseline:7.2f}")


if __name__ == "__main__":
    main()

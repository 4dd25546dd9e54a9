"""Sampler throughput: each mechanism with the secure sources against numpy's PCG64.

Prints values/s for the OS CSPRNG, the keyed AES source (replay-stable
mode) and numpy's default generator, and the ratios to numpy, all measured
in the same run (the machines are shared and noisy: only ratios mean much).
No target: the ratios are reported (README "Benchmarks").
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray
from privstream.mechanisms import LaplaceMechanism, OsEntropy, RandomizedResponse
from privstream.mechanisms.integer_laplace import IntegerLaplaceMechanism
from privstream.mechanisms.local_hashing import OptimalLocalHashing
from privstream.mechanisms.rng import KeyedSource, NoiseKeys, NoiseSource, Words, row_seeds
from privstream.mechanisms.unary_encoding import UnaryEncoding

N = 200_000
REPEATS = 5


class NumpyDefault:
    """Baseline only: numpy's PCG64, NOT acceptable for production noise."""

    def __init__(self) -> None:
        self._gen = np.random.default_rng()

    def words(self, n: int, k: int) -> Words:
        return self._gen.integers(0, 2**64, size=(n, k), dtype=np.uint64, endpoint=False)

    def more_words(self, rows: NDArray[np.int64], start: int, k: int) -> Words:
        return self.words(len(rows), k)


def best_rate(fn: Callable[[], object], n: int) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return n / best


def cases() -> dict[str, tuple[int, Callable[[NoiseSource], object]]]:
    rng = np.random.default_rng(1)
    reals = rng.uniform(0, 100, N)
    ints = rng.integers(0, 50, N)
    cats = rng.integers(0, 48, N)
    strings = np.asarray([f"https://example.org/{i % 5000}" for i in range(N // 10)], dtype=object)
    sets = np.zeros((N // 10, 20), dtype=bool)
    sets[np.arange(N // 10)[:, None], rng.integers(0, 20, (N // 10, 3))] = True  # <= 3 items
    laplace = LaplaceMechanism(bounds=(0, 100), epsilon=1.0)
    integer = IntegerLaplaceMechanism(bounds=(0, 50), epsilon=1.0)
    rr = RandomizedResponse(domain=[f"c{i}" for i in range(48)], epsilon=1.0)
    olh = OptimalLocalHashing(epsilon=2.0)
    unary = UnaryEncoding(universe=[f"h{i}" for i in range(20)], max_items=3, epsilon=2.0)
    out: dict[str, tuple[int, Callable[[NoiseSource], object]]] = {
        "words (1 per value)": (N, lambda s: s.words(N, 1)),
        "laplace (grid)": (N, lambda s: laplace.release(reals, s)),
        "discrete_laplace (integer)": (N, lambda s: integer.release(ints, s)),
        "randomized_response (48)": (N, lambda s: rr.release(cats, s)),
        "local_hashing (strings)": (len(strings), lambda s: olh.release(strings, s)),
        "unary_encoding (20 items)": (len(sets), lambda s: unary.release(sets, s)),
    }
    out.update(extra_cases(rng))
    return out


def extra_cases(rng: np.random.Generator) -> dict[str, tuple[int, Callable[[NoiseSource], object]]]:
    """Gaussian-family samplers (vector and functional work per row, not per value)."""
    from privstream.mechanisms.functional import FunctionalMechanism
    from privstream.mechanisms.gaussian import GaussianMechanism
    from privstream.mechanisms.vector_gaussian import VectorGaussianMechanism

    reals = rng.uniform(0, 100, N)
    vectors = rng.normal(size=(N // 10, 16))
    curves = rng.normal(size=(N // 100, 24))
    gauss = GaussianMechanism(bounds=(0, 100), epsilon=1.0, delta=1e-6)
    vector = VectorGaussianMechanism(dimension=16, l2_bound=4.0, epsilon=1.0, delta=1e-6)
    functional = FunctionalMechanism(
        grid_points=np.linspace(0, 1, 24).tolist(),
        bandwidth=0.2,
        rkhs_radius=1.0,
        epsilon=1.0,
        delta=1e-6,
    )
    return {
        "gaussian (grid)": (N, lambda s: gauss.release(reals, s)),
        "vector gaussian (16-d rows)": (len(vectors), lambda s: vector.release(vectors, s)),
        "functional (24-point rows)": (len(curves), lambda s: functional.release(curves, s)),
    }


def main() -> None:
    global N, REPEATS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 values, 2 repeats")
    if parser.parse_args().quick:
        N, REPEATS = 20_000, 2
    print(f"python {platform.python_version()}, numpy {np.__version__}, cpus {os.cpu_count()}")
    keys = NoiseKeys(os.urandom(32), "bench")

    def keyed(n: int) -> KeyedSource:
        rows = np.arange(n, dtype=np.int64)
        seeds = row_seeds(keys.row, rows * 0, rows, [b"{}"] * n)
        return KeyedSource(keys.field(b"bench"), seeds)

    header = f"{'sampler':28} {'os values/s':>13} {'keyed values/s':>15} {'numpy values/s':>15}"
    print(header + f" {'os/numpy':>9} {'keyed/numpy':>12}")
    for name, (n, case) in cases().items():
        source = keyed(n)
        os_rate = best_rate(lambda case=case: case(OsEntropy()), n)
        keyed_rate = best_rate(lambda case=case, source=source: case(source), n)
        numpy_rate = best_rate(lambda case=case: case(NumpyDefault()), n)
        print(
            f"{name:28} {os_rate:13,.0f} {keyed_rate:15,.0f} {numpy_rate:15,.0f}"
            f" {os_rate / numpy_rate:9.2f} {keyed_rate / numpy_rate:12.2f}"
        )


if __name__ == "__main__":
    main()

"""`estimate` over local hashing: seconds per 100,000 reports at k = 1,000 and 10,000.

An OLH estimate hashes every report against every candidate (n x k splitmix64
evaluations): the whole cost of ``estimate`` at large k. Reports are real
releases (``OptimalLocalHashing.release`` at epsilon 4, g = 56, of Zipf-distributed
values over the candidates). Two contenders, in the same run:

* privstream: ``local_hashing.estimate_frequencies`` end to end (the candidates'
  digests, the C support count on two threads, the debiasing), over
  ``--records`` reports (100,000);
* numpy: the support count as it was before the C loop (the hash step by step,
  in place, over blocks of 64 candidates x 1,024 records), over ``--numpy-records``
  reports (10,000: it is ten times slower), scaled to 100,000 (its cost is
  linear in the reports).

Both give the same integer counts (checked here on the numpy run's reports). Each
timing is the best of ``--rounds`` (3); wall seconds, with the process CPU
seconds and the load average beside them (two cores shared with other work: the
load says how much of them the run had). ``--quick``: 20,000 and 2,000 reports,
one round. Target: at most 1 s per 100,000 reports at k = 10,000, in CPU seconds of
both threads together (at least the wall time on two free cores, and not inflated
by other work on a shared machine); the wall time is printed beside it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from privstream.mechanisms.local_hashing import (
    OptimalLocalHashing,
    estimate_frequencies,
    support_counts,
    value_digests,
)
from privstream.testing import SeededSource

from bench.reference import Targets, print_environment

EPSILON = 4.0
PER = 100_000
TARGET_SECONDS = 1.0
CANDIDATES = (1_000, 10_000)
_BLOCK_CANDIDATES, _BLOCK_RECORDS = 64, 1024
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def numpy_support_counts(
    seeds: NDArray[np.uint64], buckets: NDArray[np.uint64], digests: NDArray[np.uint64], g: int
) -> NDArray[np.int64]:
    """The support count before the C loop (as it was in ``local_hashing``): the hash step
    by step, in place, over cache-sized blocks of candidates x records."""
    counts = np.zeros(len(digests), dtype=np.int64)
    work = np.empty((_BLOCK_CANDIDATES, _BLOCK_RECORDS), dtype=np.uint64)
    shifted = np.empty_like(work)
    hits = np.empty(work.shape, dtype=np.bool_)
    column, modulus = digests[:, None], np.uint64(g)
    for first in range(0, len(seeds), _BLOCK_RECORDS):
        seed = seeds[first : first + _BLOCK_RECORDS]
        bucket = buckets[first : first + _BLOCK_RECORDS]
        for start in range(0, len(digests), _BLOCK_CANDIDATES):
            chunk = column[start : start + _BLOCK_CANDIDATES]
            z, t = work[: len(chunk), : len(seed)], shifted[: len(chunk), : len(seed)]
            np.bitwise_xor(chunk, seed, out=z)
            np.add(z, _GOLDEN, out=z)
            for shift, multiplier in ((30, _MIX1), (27, _MIX2)):
                np.right_shift(z, np.uint64(shift), out=t)
                np.bitwise_xor(z, t, out=z)
                np.multiply(z, multiplier, out=z)
            np.right_shift(z, np.uint64(31), out=t)
            np.bitwise_xor(z, t, out=z)
            np.remainder(z, modulus, out=z)
            hit = np.equal(z, bucket, out=hits[: len(chunk), : len(seed)])
            counts[start : start + len(chunk)] += np.count_nonzero(hit, axis=1)
    return counts


def releases(n: int, k: int, seed: int) -> tuple[NDArray[np.uint64], list[str]]:
    """``n`` OLH reports of Zipf(1.1) values over ``k`` candidate strings."""
    candidates = [f"value-{i}" for i in range(k)]
    ranks = np.random.default_rng(seed).zipf(1.1, n) % k
    values = np.array([candidates[r] for r in ranks], dtype=object)
    return OptimalLocalHashing(epsilon=EPSILON).release(values, SeededSource(seed)), candidates


def timed(fn: Callable[[], object], rounds: int) -> tuple[float, float]:
    """The least wall seconds and the least process CPU seconds (all threads) of ``rounds``
    calls."""
    walls, cpus = [], []
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int, default=PER)
    parser.add_argument("--numpy-records", type=int, default=PER // 10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n, n_numpy, rounds = args.records, args.numpy_records, args.rounds
    if args.quick:
        n, n_numpy, rounds = 20_000, 2_000, 1
    print_environment()
    print(f"# load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    targets = Targets()
    g = OptimalLocalHashing(epsilon=EPSILON).buckets
    for k in CANDIDATES:
        released, candidates = releases(n, k, seed=k)
        seeds, buckets = released[:, 0].copy(), released[:, 1].copy()
        ours, ours_cpu = timed(
            lambda s=seeds, b=buckets, c=candidates: estimate_frequencies(s, b, c, EPSILON), rounds
        )
        digests = value_digests(candidates)
        few_seeds, few_buckets = seeds[:n_numpy], buckets[:n_numpy]
        theirs, theirs_cpu = timed(
            lambda s=few_seeds, b=few_buckets, d=digests: numpy_support_counts(s, b, d, g), rounds
        )
        same = np.array_equal(
            support_counts(few_seeds, few_buckets, digests, g),
            numpy_support_counts(few_seeds, few_buckets, digests, g),
        )
        ours_per, theirs_per = ours * PER / n, theirs * PER / n_numpy
        ours_cpu, theirs_cpu = ours_cpu * PER / n, theirs_cpu * PER / n_numpy
        print(
            f"k = {k:>6,}: privstream {ours_per:.3f} s per 100k reports (CPU {ours_cpu:.3f} s), "
            f"numpy {theirs_per:.2f} s (CPU {theirs_cpu:.2f} s), "
            f"numpy / privstream {theirs_per / ours_per:.1f}x wall, "
            f"{theirs_cpu / ours_cpu:.1f}x CPU, counts equal: {same}"
        )
        if not same:
            targets.rows.append((f"k = {k}: counts equal to numpy's", False, True))
        if k == max(CANDIDATES):
            # CPU seconds of both threads: at least the wall time on two free cores, and
            # what a loaded machine does not inflate; the wall time is shown, not enforced
            name = f"estimate, OLH, k = {k:,}"
            targets.at_most(f"{name}, CPU of both threads", ours_cpu, TARGET_SECONDS, "s per 100k")
            wall = (
                f"{name}, wall at load {os.getloadavg()[0]:.1f}: {ours_per:.2f} s per 100k (<= 1)"
            )
            targets.rows.append((wall, ours_per <= TARGET_SECONDS, False))
    print(f"# load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return targets.report()


if __name__ == "__main__":
    sys.exit(main())

"""The private density: exact integer sums, the sensitivity the noise is calibrated to,
the Gaussian-process covariance, replay, and no division by the true count."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from privstream.aggregates import KeyedCells, Partial, merge, release
from privstream.aggregates.density import QUANTUM_BITS, RHO, round_shift
from privstream.aggregates.release import encode_rows
from privstream.mechanisms.functional import gaussian_gram
from privstream.testing import SeededSource

from tests.support.aggregates import one_plan

GRID = [float(x) for x in range(0, 101, 10)]
DENSITY = {
    "name": "d",
    "query": "density",
    "field": "latency",
    "bounds": [0, 100],
    "grid": GRID,
    "bandwidth": 8,
    "epsilon": 1.0,
    "delta": 1e-6,
}


@pytest.mark.parametrize("total", [0, 1, -1, 7, -7, 8, 12, -12, 2**70 + 3, -(2**70) - 5])
@pytest.mark.parametrize("shift", [-3, 0, 1, 2, 3])
def test_round_shift_is_exact_rounding_half_to_even(total: int, shift: int) -> None:
    from fractions import Fraction

    exact = Fraction(total, 2**shift) if shift >= 0 else Fraction(total * 2**-shift)
    assert round_shift(total, shift) == round(exact)


VALUES = [-50.0, 0.0, 3.3, 47.5, 100.0, 1e9, 61.25, 99.9]


def test_a_records_whitened_vector_stays_within_rho() -> None:
    density = one_plan(DENSITY).query.density
    assert density is not None
    quanta = density.whitened(VALUES).astype(np.float64) * 2.0**-QUANTUM_BITS
    assert np.all(np.sqrt(np.sum(quanta**2, axis=1)) <= RHO)


def test_a_records_vector_is_the_same_bits_in_any_batch() -> None:
    density = one_plan(DENSITY).query.density
    assert density is not None
    batch = density.whitened(VALUES * 100)
    for position, value in enumerate(VALUES):
        assert np.array_equal(density.whitened([value])[0], batch[position])


@pytest.mark.parametrize("records", [1, 4])
def test_the_noise_is_calibrated_to_the_units_rkhs_sensitivity(records: int) -> None:
    bounds = {"records_per_group": records, "groups_per_subject": 2}
    plan = one_plan({**DENSITY, "contribution": bounds}, subject="user")
    density = plan.query.density
    assert density is not None
    core = density.mechanism.core
    assert core.radius == pytest.approx(records * RHO / 2.0)  # 2R = L rho
    assert core.delta_achieved <= 1e-6
    assert density.epsilon == 0.5 and plan.query.total("count").epsilon == 0.5
    assert plan.query.epsilon == 1.0


def test_removing_a_subject_moves_the_whitened_sums_by_at_most_l_rho() -> None:
    bounds = {"records_per_group": 3, "groups_per_subject": 1}
    plan = one_plan({**DENSITY, "contribution": bounds}, subject="user")
    rng = random.Random(8)
    data = [{"user": rng.randrange(10), "latency": rng.gauss(40, 20)} for _ in range(120)]
    full = plan.accumulator("w")
    full.add_all(data)
    for user in range(10):
        without = plan.accumulator("w")
        without.add_all(r for r in data if r["user"] != user)
        a, b = full.partial().sums, without.partial().sums
        moved = math.sqrt(sum((a.get(k, 0) - b.get(k, 0)) ** 2 for k in a)) * 2.0**-QUANTUM_BITS
        assert moved <= 3 * RHO


def test_partials_of_a_density_merge_exactly() -> None:
    plan = one_plan(DENSITY)
    values = [{"latency": float(v)} for v in range(0, 100, 3)]
    whole, left, right = (plan.accumulator("w") for _ in range(3))
    whole.add_all(values)
    left.add_all(values[:10])
    right.add_all(values[10:])
    merged = merge(left.partial(), right.partial())
    assert merged.sums == whole.partial().sums and merged.counts == whole.partial().counts


def test_the_noise_is_a_gaussian_process_path_with_the_gram_covariance() -> None:
    """3,000 draws (seed fixed) of the kernel sums on empty data: the sample covariance is
    the mechanism's ``g^2 Var(Z) (M + lambda I)``, the kernel's Gram matrix scaled. Each
    entry's estimate has sd <= sqrt(2/3000) sigma^2 ~ 0.026 sigma^2; asserted within 0.15
    sigma^2 (5.8 sd; false failure < 1e-6 over the 121 entries, union bound)."""
    density = one_plan(DENSITY).query.density
    assert density is not None
    source = SeededSource(6)
    draws = np.stack([density.noisy_sums([[0] * len(GRID)], source)[0] for _ in range(3000)])
    expected = density.mechanism.noise_covariance
    scale = float(np.max(np.diag(expected)))
    assert np.max(np.abs(np.cov(draws.T) - expected)) <= 0.15 * scale
    gram = gaussian_gram(np.array(GRID), 8.0)
    ratio = expected / gram
    assert np.allclose(ratio, ratio[0, 0], rtol=1e-6)  # the Gram matrix, up to the jitter


def test_density_rows_replay_and_divide_by_the_noisy_count() -> None:
    plan = one_plan(DENSITY)
    acc = plan.accumulator("2026-11-28")
    acc.add_all({"latency": 40.0 + (i % 7)} for i in range(500))
    partial = acc.partial()
    keyed = KeyedCells(bytes(range(32)), "raw")
    first = encode_rows(release(plan, partial, keyed))
    assert first == encode_rows(release(plan, partial, keyed))
    rows = release(plan, partial, keyed)
    assert [r["group"] for r in rows] == [{"latency": x} for x in GRID]
    top = 1.0 / (math.sqrt(2 * math.pi) * 8)
    assert all(0.0 <= r["value"] <= top for r in rows)
    assert all(r["ci95"][0] <= r["value"] <= r["ci95"][1] for r in rows)
    # an empty window: the noisy count may be 0 or negative, the rows still are densities
    empty = release(plan, Partial(plan.name, "w"), keyed)
    assert len(empty) == len(GRID) and all(0.0 <= r["value"] <= top for r in empty)

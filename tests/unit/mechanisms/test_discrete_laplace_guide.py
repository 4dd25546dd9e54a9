"""The discrete Laplace sampler's tables, built faster at start-up, hold what they held.

``bucket_counts`` replaced two ``numpy.searchsorted`` calls over the 65,536
bucket starts, and ``_level`` lost its division by exactly 1 in the head and
its per-threshold ``int(to_integral_value)``: these tests recompute the
guide, the step count and every threshold the way the code did before and
compare every entry.
"""

from __future__ import annotations

import decimal
import math
from decimal import ROUND_HALF_EVEN, Decimal

import numpy as np
import pytest
from numpy.typing import NDArray
from privstream.mechanisms import discrete_laplace as dl
from privstream.mechanisms.discrete_laplace import GeometricSampler
from privstream.mechanisms.thresholds import bucket_counts

_BITS = 16
_TOP = np.uint64(2**64 - 1)


def _searched(bounds: NDArray[np.uint64]) -> tuple[NDArray[np.int32], NDArray[np.int32]]:
    """What ``Level`` computed before: a search of every bucket's first and last word."""
    probes = np.arange(1 << _BITS, dtype=np.uint64) << np.uint64(64 - _BITS)
    guide = np.searchsorted(bounds, probes, side="right").astype(np.int32)
    last = np.append(probes[1:] - np.uint64(1), _TOP)
    return guide, np.searchsorted(bounds, last, side="right").astype(np.int32)


def _edges() -> list[NDArray[np.uint64]]:
    """Bounds on and beside bucket starts, at both ends of the word range, repeated."""
    start = 1 << (64 - _BITS)
    values = [
        [0],
        [2**64 - 1],
        [0, 1, start - 1, start, start + 1, 2 * start, 2**64 - start, 2**64 - 1],
        [start, start, start, 5 * start + 7, 5 * start + 7],
        [],
    ]
    return [np.array(v, dtype=np.uint64) for v in values]


def _random(seed: int) -> NDArray[np.uint64]:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 20_000))
    # dense and sparse bounds: many per bucket and many empty buckets
    top = np.uint64(2**64 - 1) if seed % 2 else np.uint64(2**50)
    return np.sort(rng.integers(0, top, size=size, dtype=np.uint64, endpoint=True))


@pytest.mark.parametrize("bounds", _edges() + [_random(seed) for seed in range(12)])
def test_bucket_counts_equal_the_searched_counts(bounds: NDArray[np.uint64]) -> None:
    guide, through = bucket_counts(bounds)
    expected_guide, expected_through = _searched(bounds)
    np.testing.assert_array_equal(guide, expected_guide)
    np.testing.assert_array_equal(through, expected_through)


@pytest.mark.parametrize(
    "t", [1e-6, 0.05, 1.0, 7.3, 100.0, 1280.0, 1600.0, 4096.5, 1e5, 3e9, dl.MAX_SCALE]
)
def test_every_level_of_a_sampler_has_the_searched_guide_and_steps(t: float) -> None:
    for level in GeometricSampler(t).levels:
        expected_guide, expected_through = _searched(level.bounds)
        assert level.guide.dtype == np.uint16  # what _thresholds.count reads
        np.testing.assert_array_equal(level.guide, expected_guide)
        assert level.steps == int((expected_through - expected_guide).max())
        assert len(level.padded) == len(level.bounds) + level.steps


def _thresholds_before(log_a: Decimal, exponent: int, cells: int, head: bool) -> list[int]:
    """``_level``'s thresholds, computed as before (operators in the caller's context)."""
    ctx = dl._CTX
    b = ctx.exp(ctx.multiply(log_a, Decimal(exponent)))
    top = Decimal(1) if head else Decimal(1) - ctx.power(b, cells)
    bounds, power = [], Decimal(1)
    for _ in range(1, cells):
        power = ctx.multiply(power, b)
        cumulative = ctx.divide(Decimal(1) - power, top)
        scaled = ctx.multiply(cumulative, Decimal(2**64)).to_integral_value(ROUND_HALF_EVEN)
        bounds.append(int(scaled))
    return bounds


@pytest.mark.parametrize("precision", [28, 80])  # the default context, and one above 60 digits
@pytest.mark.parametrize(
    "t", [1e-6, 0.3, 7.3, 100.00000000045, 1600.0000000072, 5000.0, 3e9, dl.MAX_SCALE]
)
def test_every_threshold_is_the_one_computed_before(t: float, precision: int) -> None:
    with decimal.localcontext() as ambient:
        ambient.prec = precision
        sampler = GeometricSampler(t)
        peel = dl.PEEL_BITS * (len(sampler.levels) - 1)
        cells = max(1, math.ceil(dl.HEAD_SPAN * t / 2.0**peel))
        for j, level in enumerate(sampler.levels[:-1]):  # digits: 4096 cells of base a^4096^j
            expected = _thresholds_before(sampler.log_a_ref, 1 << (12 * j), 1 << 12, head=False)
            assert level.bounds.tolist() == expected
        head = _thresholds_before(sampler.log_a_ref, 1 << peel, cells, head=True)
        assert sampler.levels[-1].bounds.tolist() == [*head, 2**64 - sampler.extension]


@pytest.mark.parametrize(
    ("precision", "rounding"),
    [(3, decimal.ROUND_HALF_EVEN), (16, decimal.ROUND_FLOOR), (28, decimal.ROUND_CEILING)],
)
@pytest.mark.parametrize("t", [0.3, 100.0, 5000.0, 3e9])
def test_the_callers_decimal_context_moves_no_threshold(
    t: float, precision: int, rounding: str
) -> None:
    """The tables are the product's privacy: an embedding program that lowered the
    ``decimal`` precision (or changed its rounding) must get the very same sampler, or
    else thresholds move (399 of t = 100's 400 at 3 digits) while ``xi`` sees nothing."""
    expected = GeometricSampler(t)  # pytest runs in the default context (28, HALF_EVEN)
    with decimal.localcontext() as ambient:
        ambient.prec, ambient.rounding = precision, rounding
        sampler = GeometricSampler(t)
    assert sampler.extension == expected.extension
    assert sampler.log_a_ref == expected.log_a_ref
    assert [level.bounds.tolist() for level in sampler.levels] == [
        level.bounds.tolist() for level in expected.levels
    ]
    assert [level.xi for level in sampler.levels] == [level.xi for level in expected.levels]

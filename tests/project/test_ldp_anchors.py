"""bench/utility.py's Hadamard response anchor: unbiased, and its draws follow its exact law.

The frequency table compares privstream with the least *exact* MSE of the
anchors, so a wrong law would move the reference itself. Each case draws
400 releases of one fixed sample (n = 2,000, seed fixed) in the layouts HR
takes: one block (eps 0.5), two blocks, one value per block (k = 3, eps 8)
and many blocks (k = 48, eps 4). Bounds are 5 standard errors of the
400-release mean (normal approximation): a false failure has probability
about 6e-7 per check, under 1e-4 over the 4 x 49 checks.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.ldp_anchors import HadamardLayout, hr, hr_mse

RELEASES = 400
N = 2_000
Z = 5.0


def releases(k: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(35_000 + k)
    shares = 1.0 / np.arange(1, k + 1) ** 1.1
    x = rng.choice(k, size=N, p=shares / shares.sum())
    truth = np.bincount(x, minlength=k) / N
    return np.stack([hr(x, k, eps, rng) for _ in range(RELEASES)]), truth


@pytest.mark.parametrize(
    ("k", "eps", "blocks"), [(5, 0.5, 1), (5, 1.0, 2), (3, 8.0, 4), (48, 4.0, 32)]
)
def test_hr_is_unbiased_and_its_summed_error_follows_the_exact_law(
    k: int, eps: float, blocks: int
) -> None:
    assert HadamardLayout.of(k, eps).blocks == blocks
    estimates, truth = releases(k, eps)
    bias = estimates.mean(axis=0) - truth
    standard_error = estimates.std(axis=0, ddof=1) / np.sqrt(RELEASES)
    assert np.all(np.abs(bias) <= Z * standard_error), (bias / standard_error).round(2)
    summed = ((estimates - truth) ** 2).sum(axis=1)
    law = hr_mse(truth, eps, N)
    spread = summed.std(ddof=1) / np.sqrt(RELEASES)
    assert abs(summed.mean() - law) <= Z * spread, (summed.mean() / law, spread / law)

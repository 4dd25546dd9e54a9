"""The audit's statistics: Clopper-Pearson bounds, the epsilon bound, the exact power.

Monte Carlo checks use a seeded numpy generator (deterministic); their
tolerances are 5 standard deviations of the simulated frequency.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from privstream.audit.stats import (
    cp_lower,
    cp_upper,
    epsilon_lower_bound,
    false_pass_probability,
    per_interval_level,
    plug_in_epsilon,
)


def test_clopper_pearson_closed_forms_at_the_ends() -> None:
    n, beta = 1000, 1e-3
    # k = 0: L = 0 and U solves (1 - U)^n = beta; k = n: U = 1 and L^n = beta
    assert cp_lower(0, n, beta) == 0.0
    assert cp_upper(0, n, beta) == pytest.approx(1.0 - beta ** (1.0 / n), rel=1e-9)
    assert cp_upper(n, n, beta) == 1.0
    assert cp_lower(n, n, beta) == pytest.approx(beta ** (1.0 / n), rel=1e-9)


def test_clopper_pearson_brackets_the_frequency_and_is_symmetric() -> None:
    n, beta = 500, 0.01
    k = np.arange(n + 1)
    lower, upper = cp_lower(k, n, beta), cp_upper(k, n, beta)
    assert np.all(lower <= k / n) and np.all(upper >= k / n)
    assert np.all(np.diff(lower) > 0) and np.all(np.diff(upper) > 0)
    # the lower bound for k successes is one minus the upper bound for n - k
    assert np.allclose(lower, 1.0 - upper[::-1], atol=1e-12)


@pytest.mark.parametrize("p", [0.02, 0.3, 0.5, 0.97])
def test_clopper_pearson_one_sided_coverage(p: float) -> None:
    """P[L(K) > p] <= beta and P[U(K) < p] <= beta (exact, so the frequency is at most beta)."""
    n, beta, reps = 200, 0.05, 40_000
    k = np.random.default_rng(7).binomial(n, p, size=reps)
    tolerance = 5 * math.sqrt(beta * (1 - beta) / reps)
    assert np.mean(cp_lower(k, n, beta) > p) <= beta + tolerance
    assert np.mean(cp_upper(k, n, beta) < p) <= beta + tolerance


def test_epsilon_lower_bound_formula() -> None:
    bound = epsilon_lower_bound([0.6, 0.3, 0.1], [0.2, 0.2, 0.2], 0.1)
    assert bound[0] == pytest.approx(math.log(0.5 / 0.2))
    assert bound[1] == pytest.approx(math.log(0.2 / 0.2))
    assert bound[2] == -math.inf  # L <= delta: the set says nothing
    assert plug_in_epsilon(600, 200, 1000, 0.1) == pytest.approx(math.log(0.5 / 0.2))
    assert per_interval_level(1e-3, 2, 50) == pytest.approx(1e-3 / 200)


def test_a_correct_mechanism_passes_with_probability_at_least_one_minus_2_beta() -> None:
    # the boundary of (eps, delta)-DP: p = e^eps q + delta exactly
    eps, delta, q, n, beta = 0.5, 0.01, 0.2, 5000, 1e-3
    p = math.exp(eps) * q + delta
    assert false_pass_probability(n, p, q, beta, eps, delta) >= 1.0 - 2.0 * beta


def test_false_pass_probability_matches_simulation() -> None:
    """A mildly broken set (true ratio e^0.357 against a claim of 0.3): exact vs Monte Carlo."""
    n, p, q, beta, eps, delta = 15_000, 0.5, 0.35, 1e-3, 0.3, 0.0
    exact = false_pass_probability(n, p, q, beta, eps, delta)
    assert 0.05 < exact < 0.95  # a case where the computation matters
    rng = np.random.default_rng(11)
    reps = 20_000
    kp, kq = rng.binomial(n, p, size=reps), rng.binomial(n, q, size=reps)
    passes = epsilon_lower_bound(cp_lower(kp, n, beta), cp_upper(kq, n, beta), delta) <= eps
    simulated = float(np.mean(passes))
    assert abs(simulated - exact) <= 5 * math.sqrt(exact * (1 - exact) / reps)


def test_grossly_broken_sets_essentially_never_pass() -> None:
    # half-scale Laplace at eps 0.5, the half-line at the lower bound: p = 1/2, q = e^-1 / 2
    p, q = 0.5, math.exp(-1.0) / 2
    assert false_pass_probability(100_000, p, q, 1e-7, 0.5, 0.0) < 1e-12


def test_example_4_5_arithmetic() -> None:
    """Thesis Example 4.5, from its numbers: one answer keeps (0.1, 0.4), the pair does not."""
    p, eps, delta = 0.286, 0.1, 0.4
    assert p >= (1 - delta) / (1 + math.exp(eps))  # one release is (0.1, 0.4)-DP
    both_true, both_false = (1 - p) ** 2, p**2
    assert both_true == pytest.approx(0.5098, abs=1e-4)
    assert both_false == pytest.approx(0.0818, abs=1e-4)  # the thesis truncates to 0.0817
    assert both_true > math.exp(eps) * both_false + delta  # 0.5098 > 0.4904
    # the pair's realised epsilon at delta 0.4 on A x A
    assert math.log((both_true - delta) / both_false) == pytest.approx(0.2944, abs=1e-3)

"""Gaussian mechanisms (scalar and vector): calibrations, the discrete guarantee, the grid.

Expected values are computed independently (scipy's normal CDF, plain sums
over the sampler's exact integer weights, numpy Monte Carlo). Statistical
tests use fixed seeds and state their false-failure probability for a
random seed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from privstream.errors import MechanismError
from privstream.mechanisms import LaplaceMechanism
from privstream.mechanisms.discrete_gaussian import concentrated_delta
from privstream.mechanisms.gaussian import (
    GaussianMechanism,
    analytic_gaussian_delta,
    analytic_gaussian_sigma,
)
from privstream.mechanisms.vector_gaussian import VectorGaussianMechanism
from privstream.testing import SeededSource
from scipy import special, stats

from tests.support.configs import CountingSource, laplace_gamma


def scipy_analytic_delta(eps: float, sigma: float, sens: float) -> float:
    """Balle & Wang 2018, Theorem 8, written with scipy."""
    a, b = sens / (2 * sigma), eps * sigma / sens
    return float(stats.norm.cdf(a - b) - math.exp(eps) * stats.norm.cdf(-a - b))


def exact_pmf(mech: Any) -> np.ndarray:
    """The sampler's pmf from its exact integer weights."""
    return np.array([float(w) for w in mech._sampler.weights()]) / 2.0**128


def profile_at(pmf: np.ndarray, shift: int, eps: float) -> float:
    """sum_z max(0, q(z) - e^eps q(z - shift)) by brute force."""
    padded = np.concatenate([pmf, np.zeros(shift)])
    shifted = np.concatenate([np.zeros(shift), pmf])
    return float(np.maximum(padded - math.exp(eps) * shifted, 0.0).sum())


# --- continuous calibrations -----------------------------------------------------------


@pytest.mark.parametrize(
    ("eps", "sigma", "sens"),
    [(1.0, 3.73, 1.0), (0.1, 40.0, 2.0), (5.0, 0.3, 1.0), (20.0, 0.2, 1.0)],
)
def test_analytic_delta_matches_scipy(eps: float, sigma: float, sens: float) -> None:
    assert analytic_gaussian_delta(eps, sigma, sens) == pytest.approx(
        scipy_analytic_delta(eps, sigma, sens), rel=1e-9
    )


@pytest.mark.parametrize(
    ("eps", "delta", "sens"),
    [(1.0, 1e-5, 1.0), (0.1, 1e-6, 2996.0), (3.0, 1e-10, 1.0), (10.0, 1e-3, 5.0), (0.5, 0.1, 1.0)],
)
def test_analytic_sigma_meets_delta_within_1e9(eps: float, delta: float, sens: float) -> None:
    sigma = analytic_gaussian_sigma(eps, delta, sens)
    reached = scipy_analytic_delta(eps, sigma, sens)
    assert reached <= delta * (1 + 1e-12)
    assert reached >= delta * (1 - 1e-9)


@pytest.mark.parametrize(("eps", "delta"), [(0.1, 1e-5), (0.5, 1e-6), (0.99, 0.01)])
def test_classical_formula_is_exact(eps: float, delta: float) -> None:
    mech = GaussianMechanism(bounds=(0.0, 7.0), epsilon=eps, delta=delta, calibration="classical")
    factor = math.sqrt(2 * math.log(1.25 / delta)) / eps
    assert mech.sigma_continuous == pytest.approx(factor * 7.0, rel=1e-15)
    # on the grid: the same formula with the integer sensitivity
    assert mech.sigma_grid == pytest.approx(factor * mech.sensitivity_grid, rel=1e-15)
    assert mech.sigma <= mech.sigma_continuous * (1 + 1e-15)


@pytest.mark.parametrize("eps", [1.0, 1.5, 8.0])
def test_classical_is_refused_for_eps_at_least_one(eps: float) -> None:
    with pytest.raises(MechanismError, match="analytic"):
        GaussianMechanism(bounds=(0.0, 1.0), epsilon=eps, delta=1e-5, calibration="classical")
    with pytest.raises(MechanismError, match="analytic"):
        VectorGaussianMechanism(
            dimension=3, l2_bound=1.0, epsilon=eps, delta=1e-5, calibration="classical"
        )


def test_pure_dp_is_refused_with_a_clear_error() -> None:
    with pytest.raises(MechanismError, match="delta > 0"):
        GaussianMechanism(bounds=(0.0, 1.0), epsilon=1.0, delta=0.0)
    with pytest.raises(MechanismError, match="delta > 0"):
        VectorGaussianMechanism(dimension=2, l2_bound=1.0, epsilon=1.0, delta=0.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bounds": (0.0, 1.0), "epsilon": 0.0, "delta": 1e-5},
        {"bounds": (0.0, 1.0), "epsilon": 1.0, "delta": 1.0},
        {"bounds": (1.0, 0.0), "epsilon": 1.0, "delta": 1e-5},
        {"bounds": (0.0, 1.0), "epsilon": 1.0, "delta": 1e-5, "calibration": "tight"},
    ],
)
def test_invalid_scalar_parameters(kwargs: dict[str, Any]) -> None:
    with pytest.raises(MechanismError):
        GaussianMechanism(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dimension": 0, "l2_bound": 1.0},
        {"dimension": 2.5, "l2_bound": 1.0},
        {"dimension": 3, "l2_bound": 0.0},
        {"dimension": 3, "l2_bound": math.inf},
    ],
)
def test_invalid_vector_parameters(kwargs: dict[str, Any]) -> None:
    with pytest.raises(MechanismError):
        VectorGaussianMechanism(epsilon=1.0, delta=1e-5, **kwargs)


# --- the scalar mechanism on the grid -------------------------------------------------

SCALAR_CASES = [
    # (lo, hi, eps, delta, calibration)
    (0.0, 1.0, 1.0, 1e-5, "analytic"),
    (1504.0, 4500.0, 0.1, 0.1, "analytic"),
    (-3.3, 7.1, 5.0, 1e-10, "analytic"),
    (0.1, 0.35, 0.5, 1e-6, "classical"),
]


@pytest.fixture(scope="module", params=SCALAR_CASES, ids=lambda c: f"{c[4]}-eps{c[2]}")
def scalar(request: pytest.FixtureRequest) -> GaussianMechanism:
    lo, hi, eps, delta, calibration = request.param
    return GaussianMechanism(bounds=(lo, hi), epsilon=eps, delta=delta, calibration=calibration)


def test_grid_is_a_power_of_two_and_rounding_adds_no_sensitivity(scalar: GaussianMechanism) -> None:
    g = scalar.granularity
    assert math.log2(g).is_integer()
    expected = math.floor(scalar.upper / g) - math.ceil(scalar.lower / g)
    assert scalar.sensitivity_grid == expected
    assert scalar.sensitivity_grid * g <= scalar.diameter
    # every clamped value lands inside that index range
    values = np.linspace(scalar.lower - 1.0, scalar.upper + 1.0, 10_001)
    idx = scalar.grid_indices(values)
    assert idx.max() - idx.min() <= scalar.sensitivity_grid


def test_released_noise_is_eps_delta_dp_for_every_shift(scalar: GaussianMechanism) -> None:
    """The implemented pmf, brute force over every shift up to the integer sensitivity."""
    pmf = exact_pmf(scalar)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-15)
    shift = scalar.sensitivity_grid
    worst = max(profile_at(pmf, s, scalar.epsilon) for s in range(1, shift + 1))
    assert worst <= scalar.delta
    assert scalar.delta_achieved <= scalar.delta
    if scalar.calibration == "analytic":  # tight: within 1e-8 of delta
        assert worst == pytest.approx(scalar.delta, rel=1e-8)


def test_analytic_uses_no_more_noise_than_the_continuous_calibration(
    scalar: GaussianMechanism,
) -> None:
    if scalar.calibration == "analytic":
        # discrete profile with a sensitivity that is not larger: at most a hair more sigma
        assert scalar.sigma <= scalar.sigma_continuous * (1 + 1e-6)
        assert scalar.sigma >= 0.98 * scalar.sigma_continuous


def test_neighbours_reach_the_same_grid_points(scalar: GaussianMechanism) -> None:
    g = scalar.granularity
    for value, seed in ((scalar.lower, 41), (scalar.upper, 42), (1e12, 43), (-1e12, 44)):
        out = scalar.release(np.full(5000, value), SeededSource(seed))
        steps = out / g
        assert np.array_equal(steps, np.round(steps))


def test_scalar_expected_error_matches_monte_carlo(scalar: GaussianMechanism) -> None:
    g = scalar.granularity
    first = math.ceil(scalar.lower / g)
    worst = (first + 0.5) * g  # a half-grid point: the worst rounding offset inside
    n = 100_000
    err = np.abs(scalar.release(np.full(n, worst), SeededSource(5)) - worst)
    # CLT, |z| < 4.5: false-failure probability < 1e-5
    assert abs(err.mean() - scalar.expected_error) < 4.5 * err.std() / math.sqrt(n)
    # and it is sigma sqrt(2/pi) up to the tiny rounding term
    assert scalar.expected_error == pytest.approx(scalar.sigma * math.sqrt(2 / math.pi), rel=1e-5)


def test_scalar_estimator_variance_matches_monte_carlo(scalar: GaussianMechanism) -> None:
    n = 100_000
    mid = (scalar.lower + scalar.upper) / 2
    noise = scalar.release(np.full(n, mid), SeededSource(6))
    var = scalar.estimator_variance(1)
    assert var == pytest.approx(scalar.sigma**2, rel=1e-6)
    assert scalar.estimator_variance(50) == pytest.approx(var / 50, rel=1e-12)
    # sd of the sample variance ~ var sqrt(2/n); 4.5 sd: false-failure < 1e-5
    assert abs(noise.var() - var) < 4.5 * var * math.sqrt(2 / n)


def test_scalar_gamma_is_theorem_5_3(scalar: GaussianMechanism) -> None:
    expected = laplace_gamma(scalar.diameter, scalar.epsilon, scalar.delta)
    assert scalar.gamma_lower_bound == pytest.approx(expected, rel=1e-12)
    assert scalar.expected_error >= scalar.gamma_lower_bound


def test_params_describe_the_calibration(scalar: GaussianMechanism) -> None:
    params = scalar.params()
    assert params["sigma"] == scalar.sigma
    assert params["granularity"] == scalar.granularity
    assert params["calibration"] == scalar.calibration
    assert params["delta_achieved"] <= scalar.delta  # type: ignore[operator]


def test_release_draws_two_words_per_value_exactly_once() -> None:
    mech = GaussianMechanism(bounds=(0.0, 1.0), epsilon=1.0, delta=1e-5)
    source = CountingSource(1)
    out = mech.release(np.array([0.1, 0.5, 2.0]), source)
    assert source.calls == [(3, 2)]
    assert out.shape == (3,)
    assert mech.release(np.empty(0), source).shape == (0,)


def test_zero_diameter_releases_the_value() -> None:
    mech = GaussianMechanism(bounds=(2.5, 2.5), epsilon=1.0, delta=1e-6)
    source = CountingSource(2)
    assert mech.release(np.array([-1e300, 2.5, 7.0]), source).tolist() == [2.5] * 3
    assert source.calls == [(3, 0)]
    assert mech.expected_error == 0.0
    assert mech.gamma_lower_bound == 0.0


def test_non_finite_values_are_refused_without_quoting_them() -> None:
    mech = GaussianMechanism(bounds=(0.0, 1.0), epsilon=1.0, delta=1e-5)
    with pytest.raises(MechanismError, match="not finite") as info:
        mech.release(np.array([0.3, math.nan]), SeededSource(1))
    assert "0.3" not in str(info.value)


# --- the vector mechanism --------------------------------------------------------------

VECTOR_CASES = [
    # (k, R, eps, delta, calibration)
    (3, 1.0, 1.0, 1e-5, "analytic"),
    (16, 2.5, 3.0, 1e-8, "analytic"),
    (8, 1.0, 0.5, 1e-5, "classical"),
]


@pytest.fixture(scope="module", params=VECTOR_CASES, ids=lambda c: f"{c[4]}-k{c[0]}")
def vector(request: pytest.FixtureRequest) -> VectorGaussianMechanism:
    k, radius, eps, delta, calibration = request.param
    return VectorGaussianMechanism(
        dimension=k, l2_bound=radius, epsilon=eps, delta=delta, calibration=calibration
    )


def test_vector_clipping_scales_into_the_ball(vector: VectorGaussianMechanism) -> None:
    rng = np.random.default_rng(1)
    k, radius = vector.dimension, vector.l2_bound
    x = rng.normal(size=(2000, k)) * rng.uniform(0.0, 3.0 * radius, size=(2000, 1)) / math.sqrt(k)
    x[0] = 0.0
    x[1] = 1e200  # no overflow in the norm
    clipped = vector.clip(x)
    with np.errstate(over="ignore"):  # the reference norm of row 1 overflows to inf
        norms = np.linalg.norm(x, axis=1)
    new = np.linalg.norm(clipped, axis=1)
    assert np.all(new <= radius * (1 + 1e-12))
    inside = norms <= radius
    assert np.array_equal(clipped[inside], x[inside])
    outside = ~inside & np.isfinite(norms)
    assert np.allclose(new[outside], radius, rtol=1e-12)
    cosine = np.sum(clipped[outside] * x[outside], axis=1) / (new[outside] * norms[outside])
    assert np.allclose(cosine, 1.0, rtol=1e-12)
    assert np.allclose(clipped[1], radius / math.sqrt(k), rtol=1e-12)


def test_vector_rounding_sensitivity_bound_holds(vector: VectorGaussianMechanism) -> None:
    """||round(x/g) - round(y/g)||_2 <= 2R/g + sqrt(k) for clipped x, y (random pairs)."""
    rng = np.random.default_rng(2)
    k, g = vector.dimension, vector.granularity
    x = vector.clip(rng.normal(size=(5000, k)) * 10)
    y = -x * rng.uniform(0.9, 1.0, size=(5000, 1))  # near-antipodal pairs
    gap = np.linalg.norm(np.rint(x / g) - np.rint(y / g), axis=1)
    assert gap.max() <= vector.core.sensitivity_grid
    assert vector.core.sensitivity_grid == pytest.approx(
        2 * vector.l2_bound / g + math.sqrt(k), rel=1e-12
    )


def test_vector_noise_is_certified(vector: VectorGaussianMechanism) -> None:
    core = vector.core
    assert core.delta_achieved <= vector.delta
    rho = core.sensitivity_grid**2 / (2 * core.sampler.sigma**2)
    # the ideal product's zCDP bound is within a hair of the certified figure
    assert concentrated_delta(rho, vector.epsilon) <= core.delta_achieved
    if vector.calibration == "analytic":
        assert core.delta_achieved == pytest.approx(vector.delta, rel=1e-6)
        # zCDP costs 4-10 % sigma over the continuous analytic calibration, the grid <= 2 %
        assert vector.sigma_continuous < vector.sigma < 1.15 * vector.sigma_continuous
    else:
        factor = math.sqrt(2 * math.log(1.25 / vector.delta)) / vector.epsilon
        assert core.sampler.sigma == pytest.approx(factor * core.sensitivity_grid, rel=1e-15)


def test_vector_outputs_are_grid_points_for_neighbours(vector: VectorGaussianMechanism) -> None:
    k, g = vector.dimension, vector.granularity
    a = np.zeros((500, k))
    b = np.full((500, k), 10.0)  # clipped onto the sphere
    for values, seed in ((a, 51), (b, 52)):
        out = vector.release(values, SeededSource(seed))
        assert out.shape == (500, k)
        assert np.array_equal(out / g, np.round(out / g))


def test_vector_expected_error_matches_monte_carlo(vector: VectorGaussianMechanism) -> None:
    k = vector.dimension
    n = 40_000
    # chi mean with the sampler's sd (continuous formula), plus the rounding allowance
    sd = vector.granularity * math.sqrt(vector.core.sampler.variance)
    chi = math.sqrt(2) * math.exp(special.gammaln((k + 1) / 2) - special.gammaln(k / 2))
    allowance = vector.granularity * math.sqrt(k) / 2
    assert vector.expected_error == pytest.approx(sd * chi + allowance, rel=1e-12)
    point = vector.clip(np.full((1, k), 0.37 * vector.l2_bound))
    err = np.linalg.norm(
        vector.release(np.repeat(point, n, axis=0), SeededSource(9)) - point, axis=1
    )
    # CLT on the mean norm, 4.5 se: false-failure probability < 1e-5
    tolerance = 4.5 * err.std() / math.sqrt(n)
    assert err.mean() <= vector.expected_error + tolerance
    assert err.mean() >= vector.expected_error - allowance - tolerance
    # and not the naive sqrt(k) sigma
    assert vector.expected_error < math.sqrt(k) * vector.sigma


def test_vector_variance_and_gamma(vector: VectorGaussianMechanism) -> None:
    g = vector.granularity
    assert vector.estimator_variance(10) == pytest.approx(
        g * g * vector.core.sampler.variance / 10, rel=1e-12
    )
    expected_gamma = laplace_gamma(2 * vector.l2_bound, vector.epsilon, vector.delta)
    assert vector.gamma_lower_bound == pytest.approx(expected_gamma, rel=1e-12)
    assert vector.expected_error >= vector.gamma_lower_bound


def test_vector_release_draws_words_once_and_checks_shape() -> None:
    mech = VectorGaussianMechanism(dimension=4, l2_bound=1.0, epsilon=1.0, delta=1e-5)
    source = CountingSource(3)
    assert mech.release(np.zeros((5, 4)), source).shape == (5, 4)
    assert source.calls == [(5, 8)]
    with pytest.raises(MechanismError, match="shape"):
        mech.release(np.zeros((5, 3)), source)
    with pytest.raises(MechanismError, match="not finite"):
        mech.release(np.array([[0.0, 1.0, math.inf, 0.0]]), source)


# --- edge cases ------------------------------------------------------------------------


@pytest.mark.parametrize(("eps", "delta"), [(700.0, 1e-6), (1e6, 1e-6), (1.0, 1e-30)])
def test_out_of_range_parameters_are_refused_clearly(eps: float, delta: float) -> None:
    with pytest.raises(MechanismError, match="raise delta or use the laplace mechanism"):
        GaussianMechanism(bounds=(0.0, 1.0), epsilon=eps, delta=delta)


def test_huge_epsilon_vector_is_refused_clearly() -> None:
    with pytest.raises(MechanismError, match="cannot be certified"):
        VectorGaussianMechanism(dimension=5, l2_bound=1.0, epsilon=100.0, delta=1e-6)


def test_rounding_overhead_beyond_the_table_is_refused_clearly() -> None:
    with pytest.raises(MechanismError, match="lower the dimension"):
        VectorGaussianMechanism(dimension=5000, l2_bound=1.0, epsilon=1e-3, delta=1e-6)


@pytest.mark.parametrize(("lo", "hi"), [(1e15, 1e15 + 1.0), (-1e300, 1e300), (0.0, 1e-300)])
def test_extreme_bounds_stay_finite_and_on_the_grid(lo: float, hi: float) -> None:
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        mech = GaussianMechanism(bounds=(lo, hi), epsilon=1.0, delta=1e-6)
        out = mech.release(np.array([lo, hi, (lo + hi) / 2]), SeededSource(3))
    assert np.all(np.isfinite(out))
    assert np.array_equal(out / mech.granularity, np.round(out / mech.granularity))
    assert mech.delta_achieved <= 1e-6


def test_tiny_epsilon_keeps_two_grid_points_and_real_noise() -> None:
    """eps = 1e-3 on [0, 1]: sigma ~ 4800 would ask for g = 4; g is capped at 1/2."""
    mech = GaussianMechanism(bounds=(0.0, 1.0), epsilon=1e-3, delta=1e-6)
    assert mech.granularity == 0.5
    assert mech.sensitivity_grid == 2
    assert mech.sigma == pytest.approx(mech.sigma_continuous, rel=0.1)
    out = mech.release(np.zeros(2000), SeededSource(1))
    # noise of sd ~4800 is really added: not a constant (P(all equal) is negligible)
    assert len(set(out.tolist())) > 1000
    assert mech.expected_error >= mech.gamma_lower_bound


def test_epsilon_too_small_for_the_table_is_refused_with_the_smallest_served() -> None:
    with pytest.raises(MechanismError, match=r"too small .* smallest epsilon it serves here is"):
        GaussianMechanism(bounds=(0.0, 100.0), epsilon=1e-6, delta=1e-6)


def test_bounds_too_narrow_for_their_magnitude_are_refused() -> None:
    # |bound| / 2**50 forces g = 2**17, four times the width: both bounds round to 2**50
    with pytest.raises(MechanismError, match="too narrow for their magnitude"):
        GaussianMechanism(bounds=(2.0**67, 2.0**67 + 2.0**15), epsilon=1.0, delta=1e-6)
    with pytest.raises(MechanismError, match="too narrow for their magnitude"):
        LaplaceMechanism(bounds=(2.0**67, 2.0**67 + 2.0**15), epsilon=1.0)

"""Functional (Gaussian-process) mechanism: Gram matrix, RKHS clipping, noise, errors.

Expected values are computed independently with numpy/scipy (Gram matrix,
Cholesky, eigenvalues, Monte Carlo). Statistical tests use fixed seeds and
state their false-failure probability for a random seed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from privstream.errors import MechanismError
from privstream.mechanisms.functional import (
    JITTER_STEPS,
    FunctionalMechanism,
    gaussian_norm_mean,
)
from privstream.testing import SeededSource
from scipy import linalg, special

from tests.support.configs import CountingSource, laplace_gamma

GRID = np.linspace(0.0, 1.0, 8)


def gram(points: np.ndarray, h: float) -> np.ndarray:
    return np.array([[math.exp(-((a - b) ** 2) / (2 * h * h)) for b in points] for a in points])


@pytest.fixture(scope="module")
def thesis() -> FunctionalMechanism:
    return FunctionalMechanism(
        grid_points=GRID.tolist(), bandwidth=0.3, rkhs_radius=1.0, epsilon=1.0, delta=1e-5
    )


@pytest.fixture(scope="module")
def analytic() -> FunctionalMechanism:
    return FunctionalMechanism(
        grid_points=np.linspace(0.0, 24.0, 24).tolist(),
        bandwidth=2.0,
        rkhs_radius=5.0,
        epsilon=2.0,
        delta=1e-6,
        calibration="analytic",
    )


# --- Gram matrix and jitter ----------------------------------------------------------


def test_gram_and_jittered_cholesky(thesis: FunctionalMechanism) -> None:
    m = gram(GRID, 0.3)
    assert np.allclose(thesis.gram, m, rtol=0, atol=1e-15)
    lam = thesis.jitter
    assert lam == 1e-10
    a = m + lam * np.eye(len(GRID))
    assert np.allclose(thesis.cholesky @ thesis.cholesky.T, a, rtol=0, atol=1e-13)
    assert np.allclose(thesis.cholesky, linalg.cholesky(a, lower=True), atol=1e-12)


def test_jitter_is_the_smallest_candidate_that_works() -> None:
    points = [0.0, 1e-9, 0.5, 0.5 + 1e-9, 1.0]  # numerically duplicated points
    mech = FunctionalMechanism(
        grid_points=points, bandwidth=0.4, rkhs_radius=1.0, epsilon=1.0, delta=1e-5
    )
    m = gram(np.array(points), 0.4)
    assert mech.jitter in JITTER_STEPS
    for smaller in JITTER_STEPS[: JITTER_STEPS.index(mech.jitter)]:
        with pytest.raises(np.linalg.LinAlgError):
            np.linalg.cholesky(m + smaller * np.eye(len(points)))
    np.linalg.cholesky(m + mech.jitter * np.eye(len(points)))


# --- calibration -----------------------------------------------------------------------


def test_thesis_calibration_formula(thesis: FunctionalMechanism) -> None:
    assert thesis.sigma_continuous == pytest.approx(
        math.sqrt(2 * math.log(2 / 1e-5)) * 2.0 / 1.0, rel=1e-15
    )
    core = thesis.core
    assert core.sampler.sigma == pytest.approx(
        math.sqrt(2 * math.log(2 / 1e-5)) * core.sensitivity_grid / 1.0, rel=1e-15
    )
    assert core.delta_achieved <= 1e-5
    # on the grid the scale is the thesis scale up to the (reported) rounding overhead
    assert thesis.sigma == pytest.approx(thesis.sigma_continuous, rel=2 * core.grid_overhead)


@pytest.mark.parametrize("eps", [1.01, 2.0])
def test_thesis_refuses_eps_above_one_and_names_analytic(eps: float) -> None:
    with pytest.raises(MechanismError, match="analytic"):
        FunctionalMechanism(
            grid_points=GRID.tolist(), bandwidth=0.3, rkhs_radius=1.0, epsilon=eps, delta=1e-5
        )


def test_analytic_calibration_is_certified(analytic: FunctionalMechanism) -> None:
    assert analytic.core.delta_achieved <= 1e-6
    assert analytic.core.delta_achieved == pytest.approx(1e-6, rel=1e-6)
    assert analytic.params()["calibration"] == "analytic"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"grid_points": [], "bandwidth": 1.0, "rkhs_radius": 1.0},
        {"grid_points": [0.0, math.nan], "bandwidth": 1.0, "rkhs_radius": 1.0},
        {"grid_points": [0.0, 1.0], "bandwidth": 0.0, "rkhs_radius": 1.0},
        {"grid_points": [0.0, 1.0], "bandwidth": 1.0, "rkhs_radius": -1.0},
        {"grid_points": [0.0, 1.0], "bandwidth": 1.0, "rkhs_radius": 1.0, "delta": 0.0},
        {"grid_points": [0.0, 1.0], "bandwidth": 1.0, "rkhs_radius": 1.0, "calibration": "x"},
    ],
)
def test_invalid_parameters(kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"epsilon": 0.5, "delta": 1e-5, **kwargs}
    with pytest.raises(MechanismError):
        FunctionalMechanism(**args)  # type: ignore[arg-type]


# --- clipping --------------------------------------------------------------------------


def test_clipping_in_the_rkhs_norm(thesis: FunctionalMechanism) -> None:
    rng = np.random.default_rng(4)
    v = rng.normal(size=(500, len(GRID))) * rng.uniform(0.0, 3.0, size=(500, 1))
    a = thesis.cholesky @ thesis.cholesky.T
    inv = np.linalg.inv(a)

    def norm(rows: np.ndarray) -> np.ndarray:  # ||A^(-1/2) v|| = sqrt(v^T A^-1 v)
        return np.sqrt(np.einsum("ij,jk,ik->i", rows, inv, rows))

    assert np.allclose(thesis.rkhs_norm(v), norm(v), rtol=1e-6)
    clipped = thesis.clip(v)
    assert np.all(norm(clipped) <= 1.0 * (1 + 1e-6))
    inside = norm(v) <= 0.999
    assert np.allclose(clipped[inside], v[inside], rtol=1e-6, atol=1e-9)
    # outside rows are scaled copies: same direction
    out = ~inside & (norm(v) > 1.001)
    ratio = clipped[out] / v[out]
    assert np.allclose(ratio, ratio[:, :1], rtol=1e-6)


def test_kernel_sections_inside_the_ball_are_not_clipped(thesis: FunctionalMechanism) -> None:
    """Theorem 6.8: for f = c K(., x0), ||M^(-1/2) f(x)|| <= ||f||_H = |c|; jitter only helps."""
    for x0, c in ((0.37, 0.9), (1.4, -0.95), (-0.2, 0.5)):
        f = c * np.exp(-((GRID - x0) ** 2) / (2 * 0.3**2))
        assert thesis.rkhs_norm(f[None, :])[0] <= abs(c) * (1 + 1e-9)
        assert np.allclose(thesis.clip(f[None, :])[0], f, rtol=1e-6, atol=1e-9)


# --- noise -------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["thesis", "analytic"])
def test_noise_covariance_is_scale_squared_times_gram(
    which: str, thesis: FunctionalMechanism, analytic: FunctionalMechanism
) -> None:
    mech = thesis if which == "thesis" else analytic
    k, n = mech.dimension, 40_000
    out = mech.release(np.zeros((n, k)), SeededSource(11))
    empirical = out.T @ out / n  # mean zero: the noise is symmetric
    target = mech.sigma**2 * (mech.gram + mech.jitter * np.eye(k))
    assert np.allclose(mech.noise_covariance, target, rtol=1e-6, atol=0)
    rel = np.linalg.norm(empirical - target) / np.linalg.norm(target)
    # E||S - C||_F^2 = (||C||_F^2 + tr(C)^2)/n for Gaussian rows, so the relative error
    # has sd ~ sqrt((1 + tr^2/||C||^2)/n) ~ 0.016 (k = 24) and ~0.01 (k = 8); 0.08 is
    # > 5 sd: false-failure probability < 1e-6 (normal approximation)
    assert rel < 0.08


def test_release_is_a_linear_image_of_grid_points(thesis: FunctionalMechanism) -> None:
    g = thesis.granularity
    f = np.exp(-((GRID - 0.5) ** 2) / (2 * 0.3**2)) * 0.8
    for values, seed in ((np.zeros((300, len(GRID))), 61), (np.tile(f, (300, 1)), 62)):
        out = thesis.release(values, SeededSource(seed))
        steps = linalg.solve_triangular(thesis.cholesky, out.T, lower=True).T / g
        assert np.allclose(steps, np.round(steps), atol=1e-6)


def test_release_draws_words_once(thesis: FunctionalMechanism) -> None:
    source = CountingSource(5)
    out = thesis.release(np.zeros((7, len(GRID))), source)
    assert out.shape == (7, len(GRID))
    assert source.calls == [(7, 2 * len(GRID))]
    with pytest.raises(MechanismError, match="shape"):
        thesis.release(np.zeros((2, 3)), source)


# --- errors and bounds -----------------------------------------------------------------


def test_gaussian_norm_mean_against_closed_forms() -> None:
    k = 7
    chi = math.sqrt(2) * math.exp(special.gammaln((k + 1) / 2) - special.gammaln(k / 2))
    assert gaussian_norm_mean(np.full(k, 4.0)) == pytest.approx(2.0 * chi, rel=1e-9)
    assert gaussian_norm_mean(np.array([3.0])) == pytest.approx(math.sqrt(2 * 3 / math.pi), 1e-9)
    # anisotropic: against a large numpy Monte Carlo (sd of the estimate ~ 4e-4 relative)
    mu = np.array([5.0, 1.0, 0.2, 1e-6])
    rng = np.random.default_rng(3)
    sample = np.linalg.norm(rng.normal(size=(400_000, 4)) * np.sqrt(mu), axis=1)
    assert gaussian_norm_mean(mu) == pytest.approx(sample.mean(), rel=3e-3)


@pytest.mark.parametrize("which", ["thesis", "analytic"])
def test_expected_error_matches_monte_carlo(
    which: str, thesis: FunctionalMechanism, analytic: FunctionalMechanism
) -> None:
    mech = thesis if which == "thesis" else analytic
    k, n = mech.dimension, 40_000
    f = mech.clip(np.full((1, k), 0.3))
    err = np.linalg.norm(mech.release(np.repeat(f, n, axis=0), SeededSource(13)) - f, axis=1)
    eig = np.linalg.eigvalsh(mech.gram + mech.jitter * np.eye(k))
    allowance = mech.granularity * math.sqrt(eig[-1] * k) / 2
    # CLT on the mean norm, 4.5 se: false-failure probability < 1e-5
    tolerance = 4.5 * err.std() / math.sqrt(n)
    assert err.mean() <= mech.expected_error + tolerance
    assert err.mean() >= mech.expected_error - allowance - tolerance
    # RKHS-norm error: the whitened chi mean
    white = linalg.solve_triangular(
        mech.cholesky,
        (mech.release(np.repeat(f, 2000, axis=0), SeededSource(14)) - f).T,
        lower=True,
    )
    chi = math.sqrt(2) * math.exp(special.gammaln((k + 1) / 2) - special.gammaln(k / 2))
    assert mech.expected_error_rkhs == pytest.approx(mech.sigma * chi, rel=2e-3)
    assert np.linalg.norm(white, axis=0).mean() == pytest.approx(mech.expected_error_rkhs, rel=0.05)


def test_gamma_bounds_and_variance(thesis: FunctionalMechanism) -> None:
    k = thesis.dimension
    eig = np.linalg.eigvalsh(thesis.gram + thesis.jitter * np.eye(k))
    diameter_l2 = 2.0 * 1.0 * math.sqrt(eig[-1])
    assert thesis.gamma_lower_bound == pytest.approx(laplace_gamma(diameter_l2, 1.0, 1e-5), 1e-9)
    assert thesis.gamma_lower_bound_rkhs == pytest.approx(laplace_gamma(2.0, 1.0, 1e-5), 1e-12)
    assert thesis.expected_error >= thesis.gamma_lower_bound
    assert thesis.expected_error_rkhs >= thesis.gamma_lower_bound_rkhs
    var = thesis.granularity**2 * thesis.core.sampler.variance * (1 + thesis.jitter)
    assert thesis.estimator_variance(4) == pytest.approx(var / 4, rel=1e-12)
    params = thesis.params()
    assert params["jitter"] == thesis.jitter
    assert params["grid_size"] == k


# --- overflow ----------------------------------------------------------------------------


def test_huge_finite_functions_are_clipped_onto_the_sphere() -> None:
    """Whitening overflowed from ~7.7e307 (5 points), ~5e302 (100): now they land on ||.|| = R."""
    for points, top in ((5, 1.7e308), (100, 5e302), (100, 1.7e308)):
        mech = FunctionalMechanism(
            grid_points=np.linspace(0.0, 1.0, points).tolist(),
            bandwidth=0.2,
            rkhs_radius=1.0,
            epsilon=0.9,
            delta=1e-6,
        )
        signs = np.where(np.arange(points) % 2 == 0, 1.0, -1.0)
        rows = np.vstack([top * signs, top * np.ones(points), 1e-300 * signs])
        a = gram(mech.grid_points, 0.2) + mech.jitter * np.eye(points)
        clipped = mech.clip(rows)
        assert np.all(np.isfinite(clipped))
        norms = np.sqrt(np.einsum("ij,ij->i", clipped, np.linalg.solve(a, clipped.T).T))
        # rows 0, 1 far outside: on the sphere (1e-3: solving with A costs ~cond(A) 2^-53);
        # the tiny row is inside and unchanged
        assert norms[:2] == pytest.approx([1.0, 1.0], rel=1e-3)
        assert np.array_equal(clipped[2], rows[2]) or np.allclose(clipped[2], rows[2], rtol=1e-9)
        # the direction survives: the clipped row is a positive multiple of the input
        unit = rows[0] / top
        assert np.dot(clipped[0], unit) > 0.99 * np.linalg.norm(clipped[0]) * np.linalg.norm(unit)
        released = mech.release(rows, SeededSource(7))
        assert np.all(np.isfinite(released))
        assert float(np.max(np.abs(released))) < 1e3  # sigma ~ 12: normal magnitude
        # far outside the ball (inf where the norm exceeds the double range)
        assert np.all(mech.rkhs_norm(rows[:2]) > 1e300)


@pytest.mark.parametrize("bandwidth", [5e-324, 1e-300, 1e-160, 1e160, 1.7e308])
def test_gram_matrix_is_finite_at_extreme_bandwidths(bandwidth: float) -> None:
    """``2 h^2`` underflowed to 0 for ``h < 1e-154``: ``0/0`` on the diagonal."""
    points = [-1.7e308, -1.0, 0.0, 5e-324, 1.0, 1.7e308]
    mech = FunctionalMechanism(
        grid_points=points, bandwidth=bandwidth, rkhs_radius=1.0, epsilon=0.9, delta=1e-6
    )
    assert np.all(np.isfinite(mech.gram)) and np.all(np.diag(mech.gram) == 1.0)
    assert np.all((mech.gram >= 0.0) & (mech.gram <= 1.0))
    released = mech.release(np.full((2, len(points)), 1.7e308), SeededSource(3))
    assert np.all(np.isfinite(released))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_release_refuses_non_finite_input(thesis: FunctionalMechanism, bad: float) -> None:
    rows = np.zeros((3, len(GRID)))
    rows[1, 2] = bad
    with pytest.raises(MechanismError, match="1 input value"):
        thesis.release(rows, SeededSource(1))

"""IntegerLaplaceMechanism: clamp into integer bounds, add discrete Laplace noise.

Expected values come from the discrete Laplace pmf
``p(z) = (1 - a)/(1 + a) a^|z|``, ``a = e^(-1/t)``, summed directly, with the
pure-DP scale ``t = Delta / eps`` (``Delta = hi - lo``), and from the lower
bounds of DESIGN.md section 1:

* Theorem 5.3 (compact domain, diameter Delta): ``(1 - delta) Delta / (2 (1 + e^eps))``
* Theorem 5.5 (``m + 1 = Delta + 1`` points, ``kappa = 1``): ``(1 - delta) Delta / (Delta + e^eps)``
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from typing import Any

import numpy as np
import pytest
from privstream.config import parse_config
from privstream.errors import ConfigError, MechanismError
from privstream.kinds import build_plan
from privstream.mechanisms.integer_laplace import IntegerLaplaceMechanism
from privstream.mechanisms.rng import Words
from privstream.testing import SeededSource

from tests.support.configs import config_dict


def pmf(t: float, z: int) -> float:
    a = math.exp(-1.0 / t)
    return (1.0 - a) / (1.0 + a) * math.exp(-abs(z) / t)


def support(t: float) -> range:
    reach = math.ceil(40.0 * t) + 40  # cut mass below e^-40
    return range(-reach, reach + 1)


def mean_abs(t: float) -> float:
    return math.fsum(abs(z) * pmf(t, z) for z in support(t))


def variance(t: float) -> float:
    return math.fsum(z * z * pmf(t, z) for z in support(t))


def gamma_compact(sens: int, eps: float, delta: float) -> float:
    return (1.0 - delta) * sens / (2.0 * (1.0 + math.exp(eps)))


def gamma_finite(sens: int, eps: float, delta: float) -> float:
    return (1.0 - delta) * sens / (sens + math.exp(eps))


class FixedWords:
    """A noise source that serves a given word array (one call)."""

    def __init__(self, words: Words) -> None:
        self._words = words

    def words(self, n: int, k: int) -> Words:
        assert self._words.shape == (n, k)
        return self._words


# --- release -------------------------------------------------------------------------


def test_outputs_are_int64_integers() -> None:
    mech = IntegerLaplaceMechanism(bounds=(-3, 12), epsilon=0.7)
    out = mech.release(np.array([0, 5, -3, 12, 7], dtype=np.int64), SeededSource(1))
    assert out.dtype == np.int64
    assert out.shape == (5,)
    assert all(isinstance(v, int) for v in out.tolist())


def test_release_is_clamped_value_plus_the_sampler_noise() -> None:
    # the same words give the same noise; the value only enters through clamping
    # (the word-level mapping is tested in test_sampler_exactness)
    mech = IntegerLaplaceMechanism(bounds=(-3, 12), epsilon=0.7)
    assert mech.noise is not None
    values = np.array([-50, -3, 4, 12, 10**9], dtype=np.int64)
    noise = mech.noise.sample(SeededSource(2), len(values))
    expected = np.clip(values, -3, 12) + noise
    assert mech.release(values, SeededSource(2)).tolist() == expected.tolist()


@pytest.mark.parametrize(("raw", "bound"), [(10**6, 10), (-(10**6), 0), (11, 10), (-1, 0)])
def test_out_of_range_inputs_are_clamped_before_noise(raw: int, bound: int) -> None:
    eps = 1.0
    mech = IntegerLaplaceMechanism(bounds=(0, 10), epsilon=eps)
    n = 20_000
    out = mech.release(np.full(n, raw, dtype=np.int64), SeededSource(3 + raw % 97))
    # noise is symmetric around the clamped value: the mean is the bound.
    # sd of the mean = sqrt(Var Z / n), Var Z = 2a/(1-a)^2; 6 sd: false failure < 2e-9
    t = 10 / eps
    a = math.exp(-1.0 / t)
    sd_mean = math.sqrt(2 * a / (1 - a) ** 2 / n)
    assert abs(out.mean() - bound) < 6 * sd_mean
    # noise was added after clamping: outputs leave the bounds on both sides
    # (P(Z >= 0 for all 20k draws) is ((1 + a)^-1 ... )^20k, astronomically small)
    assert out.min() < 0
    assert out.max() > 10


def test_in_range_inputs_keep_their_mean() -> None:
    mech = IntegerLaplaceMechanism(bounds=(0, 100), epsilon=2.0)
    n = 20_000
    out = mech.release(np.full(n, 37, dtype=np.int64), SeededSource(4))
    t = 100 / 2.0
    a = math.exp(-1.0 / t)
    # 6 sd of the mean: false-failure probability < 2e-9
    assert abs(out.mean() - 37) < 6 * math.sqrt(2 * a / (1 - a) ** 2 / n)
    # and the spread matches Var Z (relative sd of a variance estimate ~ sqrt(5/n)
    # for this kurtosis; 6 sd is 0.1)
    assert out.var() == pytest.approx(variance(t), rel=0.1)


# --- guarantee and accuracy ----------------------------------------------------------

PURE_CASES = [((0, 10), 1.0), ((-3, 12), 0.7), ((0, 1), 0.1), ((100, 140), 3.0), ((0, 1000), 5.0)]


@pytest.mark.parametrize(("bounds", "eps"), PURE_CASES)
def test_pure_scale_and_expected_error(bounds: tuple[int, int], eps: float) -> None:
    mech = IntegerLaplaceMechanism(bounds=bounds, epsilon=eps)
    sens = bounds[1] - bounds[0]
    t = sens / eps
    assert mech.sensitivity == sens
    params = mech.params()
    # calibrated at eps (1 - 2^-40) - 3.6e-12, the sampler's slack: a hair above sens/eps
    assert t < float(params["scale"]) <= t * (1 + 1e-10)
    assert params == {"scale": params["scale"], "lower": bounds[0], "upper": bounds[1]}
    assert mech.expected_error == pytest.approx(mean_abs(t), rel=1e-10)


@pytest.mark.parametrize(("bounds", "eps", "delta"), [((0, 10), 1.0, 1e-5), ((-3, 12), 0.5, 0.01)])
def test_expected_error_with_delta_is_e_abs_z_at_the_calibrated_scale(
    bounds: tuple[int, int], eps: float, delta: float
) -> None:
    mech = IntegerLaplaceMechanism(bounds=bounds, epsilon=eps, delta=delta)
    t = float(mech.params()["scale"])
    assert t < (bounds[1] - bounds[0]) / eps  # delta > 0 buys less noise
    assert mech.expected_error == pytest.approx(mean_abs(t), rel=1e-10)
    assert mech.estimator_variance(7) == pytest.approx(variance(t) / 7, rel=1e-10)


@pytest.mark.parametrize(
    ("bounds", "eps", "delta", "winner"),
    [
        ((0, 1), 0.1, 0.0, "finite"),
        ((0, 5), 1.0, 1e-6, "compact"),
        ((0, 1000), 1.0, 0.0, "compact"),
        ((-50, 50), 0.5, 0.01, "compact"),
        ((0, 3), 10.0, 0.0, "finite"),
    ],
)
def test_gamma_is_the_larger_of_theorems_5_3_and_5_5(
    bounds: tuple[int, int], eps: float, delta: float, winner: str
) -> None:
    mech = IntegerLaplaceMechanism(bounds=bounds, epsilon=eps, delta=delta)
    sens = bounds[1] - bounds[0]
    compact = gamma_compact(sens, eps, delta)
    finite = gamma_finite(sens, eps, delta)
    assert (compact > finite) == (winner == "compact")
    assert mech.gamma_lower_bound == pytest.approx(max(compact, finite), rel=1e-12)
    assert mech.gamma_lower_bound <= mech.expected_error


@pytest.mark.parametrize("n", [1, 10, 1000])
@pytest.mark.parametrize(("bounds", "eps"), PURE_CASES[:3])
def test_estimator_variance_is_var_z_over_n(bounds: tuple[int, int], eps: float, n: int) -> None:
    mech = IntegerLaplaceMechanism(bounds=bounds, epsilon=eps)
    t = (bounds[1] - bounds[0]) / eps
    assert mech.estimator_variance(n) == pytest.approx(variance(t) / n, rel=1e-10)


def test_zero_width_bounds_release_the_bound_without_noise() -> None:
    mech = IntegerLaplaceMechanism(bounds=(5, 5), epsilon=1.0)
    out = mech.release(np.array([-100, 5, 6, 10**12], dtype=np.int64), SeededSource(5))
    assert out.tolist() == [5, 5, 5, 5]
    assert out.dtype == np.int64
    assert mech.expected_error == 0.0
    assert mech.estimator_variance(10) == 0.0
    assert mech.gamma_lower_bound == 0.0
    assert mech.params()["scale"] == 0.0


def huge_scale_expected_error(sens: int, eps: float) -> float:
    with localcontext() as ctx:
        ctx.prec = 60
        a = (Decimal(-eps) / Decimal(sens)).exp()
        return float(2 * a / ((1 - a) * (1 + a)))


def test_expected_error_for_wide_bounds_and_small_epsilon() -> None:
    mech = IntegerLaplaceMechanism(bounds=(0, 10**9), epsilon=0.01)  # t = 1e11 < 2**40
    assert mech.expected_error == pytest.approx(huge_scale_expected_error(10**9, 0.01), rel=1e-6)


def test_noise_scale_beyond_the_sampler_is_a_config_error() -> None:
    fields = [{"name": "n", "kind": "integer", "bounds": [0, 10**15], "epsilon": 0.01}]
    with pytest.raises(ConfigError) as info:
        build_plan(parse_config(config_dict(fields, epsilon=1.0)))
    assert info.value.problems == [
        "fields[0] (n): epsilon 0.01 is below the smallest the discrete Laplace sampler serves "
        "at sensitivity 1000000000000000, 909 (the noise parameter Delta/epsilon must stay "
        "<= 2**40, and the sampler's slack of 3.6e-12 below a thousandth of epsilon); "
        "raise epsilon or narrow the bounds"
    ]


def test_noise_does_not_overflow_for_wide_bounds_and_small_epsilon() -> None:
    bounds, eps = (0, 2**52), 0.001
    try:
        mech = IntegerLaplaceMechanism(bounds=bounds, epsilon=eps)
    except MechanismError:
        return  # refusing parameters whose noise does not fit in int64 is a correct fix
    t = 2**52 / eps
    n = 2_000
    words = SeededSource(6).words(n, 2)
    u = ((words >> np.uint64(12)).astype(np.float64) + 0.5) * 2.0**-52
    e = -np.log(u)
    expected = [math.floor(t * e[i, 0]) - math.floor(t * e[i, 1]) for i in range(n)]
    out = mech.release(np.zeros(n, dtype=np.int64), FixedWords(words))
    assert [int(v) for v in out.tolist()] == expected


# --- bounds validation ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        ((0, 2.5), "must be whole numbers for an integer field"),
        ((0.5, 3), "must be whole numbers for an integer field"),
        ((0, 2**53), "must lie within +/- 2**53"),
        ((-(2**53), 0), "must lie within +/- 2**53"),
        ((0, 1e300), "must lie within +/- 2**53"),
        ((5, 1), "are reversed"),
    ],
)
def test_invalid_integer_bounds_are_rejected(bounds: Any, message: str) -> None:
    with pytest.raises(MechanismError, match=message.replace("+", r"\+").replace("*", r"\*")):
        IntegerLaplaceMechanism(bounds=bounds, epsilon=1.0)
    fields = [{"name": "n", "kind": "integer", "bounds": list(bounds), "epsilon": 1.0}]
    with pytest.raises(ConfigError) as info:
        parse_config(config_dict(fields, epsilon=1.0))
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith("fields[0] (n).bounds: ")
    assert message in info.value.problems[0]


def test_largest_safe_bounds_are_accepted() -> None:
    top = 2**53 - 1
    fields = [{"name": "n", "kind": "integer", "bounds": [-top, top], "epsilon": 1.0}]
    parse_config(config_dict(fields, epsilon=1.0))  # the bounds themselves are fine
    # ... but their noise (t = 2**54) is beyond what the sampler can draw faithfully
    with pytest.raises(MechanismError, match="2\\*\\*40"):
        IntegerLaplaceMechanism(bounds=(-top, top), epsilon=1.0)
    mech = IntegerLaplaceMechanism(bounds=(-top, top), epsilon=2.0**15)
    assert (mech.lower, mech.upper) == (-top, top)
    assert mech.sensitivity == 2 * top


@pytest.mark.parametrize("kwargs", [{"epsilon": 0.0}, {"epsilon": 1.0, "delta": 1.0}])
def test_invalid_budget_is_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(MechanismError):
        IntegerLaplaceMechanism(bounds=(0, 10), **kwargs)

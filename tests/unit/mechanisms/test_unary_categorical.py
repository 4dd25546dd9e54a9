"""OUE for categorical fields (``UnaryCategorical``) and its place in ``mechanism: auto``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from privstream.errors import MechanismError
from privstream.mechanisms.local_hashing import OptimalLocalHashing
from privstream.mechanisms.selection import (
    OLH_MARGIN,
    frequency_variances,
    least_variance,
    unary_oue,
    vector_variance,
)
from privstream.mechanisms.unary_categorical import UnaryCategorical
from privstream.testing import SeededSource

from tests.support.configs import CountingSource

TWO_64 = 2**64


@pytest.mark.parametrize("eps", [0.01, 0.5, 1.0, 2.0, 4.0, 10.0])
def test_thresholds_realise_p_one_half_and_q_within_epsilon(eps: float) -> None:
    mech = UnaryCategorical(domain=["a", "b", "c"], epsilon=eps)
    # p = 1/2 exactly; q = 1 / (e^eps + 1) up to the double's rounding, on the 2^-64 grid
    assert mech.p == 0.5
    assert mech.q == pytest.approx(1 / (math.exp(eps) + 1), rel=1e-14)
    assert (mech.q * TWO_64).is_integer()
    # the largest ratio between two values: (p / q) ((1 - q) / (1 - p)) = (1 - q) / q <= e^eps
    assert math.log((1 - mech.q) / mech.q) <= eps * (1 + 1e-12)
    assert mech.realized_epsilon <= eps


def test_release_draws_once_and_flips_each_bit_at_its_rate() -> None:
    k, n, eps = 8, 40_000, 1.0
    mech = UnaryCategorical(domain=[f"v{j}" for j in range(k)], epsilon=eps)
    source = CountingSource(4)
    values = np.arange(n, dtype=np.int64) % k
    bits = mech.release(values, source)
    assert source.calls == [(n, k)]
    own = bits[np.arange(n), values]
    others = bits.sum() - own.sum()
    q = 1 / (math.exp(eps) + 1)
    # 5 standard errors each: false failure below 2 * 6e-7 for a random seed
    assert abs(own.mean() - 0.5) < 5 * math.sqrt(0.25 / n)
    m = n * (k - 1)
    assert abs(others / m - q) < 5 * math.sqrt(q * (1 - q) / m)


def test_noise_error_is_the_hamming_distance_and_averages_to_expected_error() -> None:
    k, n = 20, 20_000
    mech = UnaryCategorical(domain=list(range(k)), epsilon=2.0)
    values = np.arange(n, dtype=np.int64) % k
    bits = mech.release(values, SeededSource(9))
    errors = mech.noise_error(values, bits)
    assert errors is not None
    one_hot = np.eye(k, dtype=bool)[values]
    assert np.array_equal(errors, (bits != one_hot).sum(axis=1))
    expected = 0.5 + (k - 1) / (math.exp(2.0) + 1)  # written from the formula
    assert mech.expected_error == pytest.approx(expected, rel=1e-12)
    # Var[rho] <= 1/4 + (k - 1)/4 per record; 5 standard errors: false failure below 6e-7
    assert abs(errors.mean() - expected) < 5 * math.sqrt(k / 4 / n)


def test_gamma_is_theorem_5_5_with_kappa_one_over_the_domain() -> None:
    mech = UnaryCategorical(domain=[f"v{j}" for j in range(1000)], epsilon=1.0)
    assert mech.gamma_lower_bound == pytest.approx(999 / (999 + math.e), rel=1e-12)
    # the per-record view the issue quotes: about 270x randomized response's optimum
    assert 265 < mech.expected_error / mech.gamma_lower_bound < 275


def test_release_refuses_positions_outside_the_domain() -> None:
    mech = UnaryCategorical(domain=["a", "b"], epsilon=1.0)
    with pytest.raises(MechanismError, match=r"domain positions in 0\.\.1"):
        mech.release(np.array([0, 2]), SeededSource(1))


# --- the auto rule ------------------------------------------------------------------------


def test_olh_stays_within_4_1_percent_of_oue_for_every_epsilon() -> None:
    """The selection docstring's bound: OLH / OUE in [0.95, 1.0406] for k >= 3 on a fine grid."""
    ratios = []
    for eps in np.arange(0.01, 12.0, 0.01):
        oue, olh = unary_oue(float(eps)), OptimalLocalHashing(epsilon=float(eps))
        ratios += [
            vector_variance(olh, k, 1) / vector_variance(oue, k, 1) for k in (3, 4, 48, 1000, 2**17)
        ]
    assert min(ratios) > 0.95 and max(ratios) < 1.0406 < OLH_MARGIN


def test_auto_never_picks_oue_where_local_hashing_can_run() -> None:
    """Where OUE beats RR (k >= 3), OLH is within the 5% margin: auto takes OLH."""
    for eps in np.arange(0.05, 8.0, 0.05):
        for k in (*range(2, 40), 100, 1000):
            assert least_variance(frequency_variances(k, float(eps))) != "unary_encoding"


def test_oue_wins_only_beyond_the_margin_and_ties_go_to_the_first_candidate() -> None:
    assert least_variance({"local_hashing": 1.04, "unary_encoding": 1.0}) == "local_hashing"
    assert least_variance({"local_hashing": 1.06, "unary_encoding": 1.0}) == "unary_encoding"
    assert least_variance({"randomized_response": 1.0, "unary_encoding": 1.0}) == (
        "randomized_response"
    )
    assert least_variance({"randomized_response": 2.0, "unary_encoding": 1.0}) == ("unary_encoding")


def test_candidates_depend_on_size_and_delta_only() -> None:
    assert set(frequency_variances(48, 1.0)) == {
        "randomized_response",
        "local_hashing",
        "subset_selection",
        "unary_encoding",
    }
    assert set(frequency_variances(48, 1.0, 1e-6)) == {"randomized_response"}
    # OUE draws one word per value: not beyond the noise source's per-record limit
    assert "unary_encoding" not in frequency_variances(2**17 + 1, 1.0)
    assert frequency_variances(48, 1.0) == frequency_variances(48, 1.0)
    # the calibration of the auto candidate is the mechanism's, whatever k
    mech = UnaryCategorical(domain=list(range(1000)), epsilon=1.0)
    assert (mech.p, mech.q) == (unary_oue(1.0).p, unary_oue(1.0).q)

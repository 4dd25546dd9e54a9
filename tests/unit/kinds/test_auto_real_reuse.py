"""The real ``auto`` assessment measures each candidate once and reuses the plan's mechanism.

Start-up time: each candidate build calibrates a sampler (Laplace: ~17 ms), and
the plan's ``auto`` and the declared-mechanism warnings of ``run`` and
``sanitize`` ask for the same candidates. The numbers must be those of fresh
builds, bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from privstream.config import Guarantee
from privstream.config.fields import RealField
from privstream.kinds import auto_real
from privstream.kinds.auto import WARN_RATIO
from privstream.kinds.real_ldp import MECHANISMS
from privstream.mechanisms.base import Mechanism
from privstream.mechanisms.gaussian import GaussianMechanism
from privstream.mechanisms.hybrid import HybridMechanism
from privstream.mechanisms.laplace import LaplaceMechanism
from privstream.mechanisms.piecewise import PiecewiseMechanism
from privstream.mechanisms.unit_interval import error_points


def real(**extra: Any) -> RealField:
    return RealField.model_validate({"name": "x", "kind": "real", "epsilon": 1, **extra})


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    auto_real._candidate_measures.cache_clear()
    yield
    auto_real._candidate_measures.cache_clear()


CASES = [
    ({"bounds": [-20, 60], "mechanism": "laplace"}, Guarantee(1.0, 0.0)),
    ({"bounds": [0, 100]}, Guarantee(2.0, 0.0)),
    ({"bounds": [0, 1e6]}, Guarantee(0.5, 1e-3)),
    ({"bounds": [0, 10], "mechanism": "laplace", "calibration": "thesis"}, Guarantee(2.0, 0.0)),
    ({"bounds": [5, 5]}, Guarantee(1.0, 0.0)),
    ({"bounds": [-1, 1], "mechanism": "hybrid"}, Guarantee(0.3, 0.0)),
]


def _fresh(name: str, spec: RealField, share: Guarantee) -> Mechanism:
    bounds = (float(spec.bounds[0]), float(spec.bounds[1]))
    if name == "laplace":
        calibration = "thesis" if spec.calibration == "thesis" else "tight"
        return LaplaceMechanism(
            bounds=bounds, epsilon=share.epsilon, delta=share.delta, calibration=calibration
        )
    return MECHANISMS[name](bounds=bounds, epsilon=share.epsilon, delta=share.delta)


@pytest.mark.parametrize(("extra", "share"), CASES)
def test_the_kept_numbers_are_those_of_fresh_builds(
    extra: dict[str, Any], share: Guarantee
) -> None:
    spec = real(**extra)
    entry = auto_real.explain_auto_real(spec, share, WARN_RATIO)["auto"]
    for name, variance in entry["candidate_variances"].items():
        fresh = _fresh(name, spec, share)
        assert variance == fresh.estimator_variance(1000)
        # and the law behind the regrets: asked again, it comes from the cache unchanged
        candidate = spec.model_copy(update={"name": "auto", "mechanism": name})
        measures = auto_real._candidate_measures(candidate, share)
        assert measures is not None
        assert measures[0] == fresh.variance_law()
    # a second assessment builds nothing: every candidate is a cache hit
    misses = auto_real._candidate_measures.cache_info().misses
    assert auto_real.explain_auto_real(spec, share, WARN_RATIO)["auto"] == entry
    assert auto_real._candidate_measures.cache_info().misses == misses


def test_the_plan_mechanism_stands_in_for_its_candidate() -> None:
    spec, share = real(bounds=[-20, 60], mechanism="laplace"), Guarantee(1.0, 0.0)
    planned = _fresh("laplace", spec, share)
    with_plan = auto_real.explain_auto_real(spec, share, WARN_RATIO, planned)
    # the five local mechanisms built, laplace taken from the plan
    assert auto_real._candidate_measures.cache_info().misses == 5
    auto_real._candidate_measures.cache_clear()
    assert auto_real.explain_auto_real(spec, share, WARN_RATIO) == with_plan
    assert with_plan["auto_warning"] is not None and "1.87x" in with_plan["auto_warning"]


def test_a_mechanism_built_at_another_share_or_of_another_kind_is_not_reused() -> None:
    # the plan's mechanism is built from the same spec (explain passes the field's own),
    # so its bounds and calibration are the spec's; its share and name are checked
    spec, share = real(bounds=[-20, 60], mechanism="laplace"), Guarantee(1.0, 0.0)
    others = [
        _fresh("laplace", spec, Guarantee(1.5, 0.0)),
        _fresh("laplace", spec, Guarantee(1.0, 1e-9)),
        GaussianMechanism(bounds=(-20.0, 60.0), epsilon=1.0, delta=1e-6),
    ]
    for other in others:
        auto_real._candidate_measures.cache_clear()
        auto_real.explain_auto_real(spec, share, WARN_RATIO, other)
        assert auto_real._candidate_measures.cache_info().misses == 6


@pytest.mark.parametrize("mechanism", [PiecewiseMechanism, HybridMechanism])
def test_the_expected_error_table_is_built_on_first_use(
    mechanism: type[PiecewiseMechanism | HybridMechanism],
) -> None:
    built = mechanism(bounds=(-20.0, 60.0), epsilon=1.0)
    assert "_worst_error" not in vars(built)  # the 129 x 4096 table is not built yet
    points = error_points()
    if isinstance(built, PiecewiseMechanism):
        errors = built.grid.mean_abs_error(points)
    else:
        assert isinstance(built, HybridMechanism)
        a, b = built.pm_probability, built.coin.magnitude
        errors = a * built.grid.mean_abs_error(points) + (1.0 - a) * (b - points**2 / b)
    assert built.expected_error == 40.0 * float(errors.max())
    assert built.worst_t == float(points[int(np.argmax(errors))])
    assert "_worst_error" in vars(built)  # built once, kept


def test_bounds_near_the_double_range_get_a_finite_laplace_law() -> None:
    # g^2 overflows at [0, 1e280]; half^2 at [0, 3e154] (g small at epsilon 1000): the law
    # used to raise OverflowError (a traceback from build_plan) or come out as 0
    for bounds, epsilon in (((0.0, 1e280), 1.0), ((0.0, 3e154), 1000.0)):
        mechanism = LaplaceMechanism(bounds=bounds, epsilon=epsilon)
        law = mechanism.variance_law()
        slope, constant = law.square, law.constant
        half = bounds[1] / 2.0
        assert slope == 0.0
        assert mechanism.noise is not None
        assert constant == (mechanism.granularity / half) ** 2 * mechanism.noise.variance
        assert 0.0 < constant < float("inf")
        # the same law, in t units, as at ordinary bounds with the same grid ratio
        scaled = LaplaceMechanism(bounds=(0.0, bounds[1] * 2.0**-900), epsilon=epsilon)
        assert scaled.variance_law().constant == pytest.approx(constant, rel=1e-12)
    spec = real(bounds=[0, 1e280])
    choice = auto_real.auto_real_choice(spec, Guarantee(1.0, 0.0))
    # as at every width: the law does not see the bounds
    assert choice.mechanism == "three_outputs"

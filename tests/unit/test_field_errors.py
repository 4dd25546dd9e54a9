"""Observed error per field: a function of the noise alone, aggregated into Prometheus metrics."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from service.config import parse_config
from service.field_errors import BUCKET_MULTIPLES, FieldErrors, error_buckets
from service.mechanisms import LaplaceMechanism, RandomizedResponse
from service.mechanisms.gaussian import GaussianMechanism
from service.mechanisms.integer_laplace import IntegerLaplaceMechanism
from service.mechanisms.vector_gaussian import VectorGaussianMechanism
from service.metrics import Metrics
from service.pipeline import build_plan, process_batch
from service.pipeline.results import Observation
from service.testing import SeededSource
from tests.unit._support import config_dict

N = 20_000


def test_noise_error_does_not_depend_on_the_data_laplace_and_gaussian() -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 10, N)
    y = rng.uniform(0, 10, N)  # other data, same noise words
    for mech in (
        LaplaceMechanism(bounds=(0, 10), epsilon=1.0, delta=0.0),
        GaussianMechanism(bounds=(0, 10), epsilon=0.5, delta=1e-6),
    ):
        ex = mech.noise_error(x, mech.release(x, SeededSource(7)))
        ey = mech.noise_error(y, mech.release(y, SeededSource(7)))
        assert np.array_equal(ex, ey)
        assert np.all(ex >= 0)


def test_noise_error_does_not_depend_on_the_data_discrete_kinds() -> None:
    rr = RandomizedResponse(domain=("a", "b", "c"), epsilon=1.0, delta=0.0)
    first, second = np.zeros(N, dtype=np.int64), np.full(N, 2, dtype=np.int64)
    e1 = rr.noise_error(first, rr.release(first, SeededSource(3)))
    e2 = rr.noise_error(second, rr.release(second, SeededSource(3)))
    assert np.array_equal(e1, e2) and set(np.unique(e1)) <= {0.0, 1.0}
    counter = IntegerLaplaceMechanism(bounds=(0, 50), epsilon=1.0, delta=0.0)
    a, b = np.zeros(N, dtype=np.int64), np.full(N, 37, dtype=np.int64)
    assert np.array_equal(
        counter.noise_error(a, counter.release(a, SeededSource(4))),
        counter.noise_error(b, counter.release(b, SeededSource(4))),
    )


def test_vector_noise_error_does_not_depend_on_the_data() -> None:
    vec = VectorGaussianMechanism(dimension=3, l2_bound=2.0, epsilon=1.0, delta=1e-6)
    a = np.zeros((500, 3))
    b = np.tile([1.0, -1.0, 0.5], (500, 1))
    assert np.array_equal(
        vec.noise_error(a, vec.release(a, SeededSource(5))),
        vec.noise_error(b, vec.release(b, SeededSource(5))),
    )


@pytest.mark.parametrize("eps", [0.1, 1.0, 4.0])
def test_observed_mean_matches_expected_error_and_respects_gamma(eps: float) -> None:
    """Mean of N errors vs the mechanism's worst-case E|error|.

    The observed error is ``g|Z|``; the worst case adds at most half a grid
    step, ``g/2 = scale/2^11``. With N = 20,000, the mean's sd is at most
    ``scale/sqrt(N) = 0.7%`` of the scale: a 5% band fails with p < 1e-12.
    """
    mech = LaplaceMechanism(bounds=(0, 100), epsilon=eps, delta=0.0)
    x = np.full(N, 50.0)
    mean = float(mech.noise_error(x, mech.release(x, SeededSource(11))).mean())
    assert mean == pytest.approx(mech.expected_error, rel=0.05)
    assert mean >= mech.gamma_lower_bound


def test_randomized_response_flip_rate_matches_expected_error() -> None:
    """Flip indicator mean vs 1 - keep; binomial sd < 0.0036 at N: 5 sd band, p < 1e-6."""
    rr = RandomizedResponse(domain=tuple(range(48)), epsilon=2.0, delta=0.0)
    x = np.arange(N, dtype=np.int64) % 48
    rate = float(rr.noise_error(x, rr.release(x, SeededSource(12))).mean())
    assert abs(rate - rr.expected_error) < 5 * math.sqrt(0.25 / N)


CONFIG = config_dict(
    [
        {"name": "device", "kind": "drop"},
        {"name": "seq", "kind": "public"},
        {"name": "temp", "kind": "real", "bounds": [0, 40], "epsilon": 1.0},
        {"name": "clicks", "kind": "integer", "bounds": [0, 10], "epsilon": 1.0},
        {"name": "state", "kind": "categorical", "domain": ["TX", "CA"], "epsilon": 1.0},
        {"name": "loyal", "kind": "categorical", "domain": ["y", "n"], "epsilon": 1.0,
         "memoize_by": "device", "memo_identity_trusted": True},
        {"name": "tags", "kind": "set", "universe": ["a", "b", "c"], "max_items": 2,
         "epsilon": 1.0},
    ],
    epsilon=5.0,
)  # fmt: skip


def batch(n: int) -> list[bytes]:
    return [
        json.dumps(
            {
                "device": f"d{i}",
                "seq": i,
                "temp": -5.0 if i % 10 == 0 else 20.0,  # every tenth below the bounds
                "clicks": 99 if i % 4 == 0 else 3,  # every fourth above
                "state": "TX",
                "loyal": "y",
                "tags": ["a"],
            }
        ).encode()
        for i in range(n)
    ]


def test_process_batch_observes_errors_and_clamps_per_field() -> None:
    plan = build_plan(parse_config(CONFIG))
    result = process_batch(plan, batch(200), SeededSource(1))
    seen = result.observations
    assert set(seen) == {"temp", "clicks", "state", "loyal", "tags"}  # not public ones
    assert seen["temp"].clamped == 20 and seen["clicks"].clamped == 50
    assert seen["state"].clamped == 0
    assert seen["temp"].error is not None and len(seen["temp"].error) == 200
    assert seen["loyal"].error is None  # memoized: its noise follows the value
    assert seen["tags"].error is None  # sets: the error depends on the set's size


def test_metrics_exposition_histogram_mean_ratio_and_clamped() -> None:
    plan = build_plan(parse_config(CONFIG))
    registry = CollectorRegistry()
    collector = Metrics(registry).describe_plan(plan)
    result = process_batch(plan, batch(1000), SeededSource(2))
    collector.observe(result.observations)
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())
    }
    temp = [
        s
        for s in families["privstream_field_observed_error"].samples
        if s.labels["field"] == "temp"
    ]
    buckets = [s for s in temp if s.name.endswith("_bucket")]
    counts = [s.value for s in buckets]
    assert counts == sorted(counts) and counts[-1] == 1000  # cumulative, all observed
    assert len(buckets) == len(BUCKET_MULTIPLES) + 1
    expected = plan.handlers[1].mechanism.expected_error  # type: ignore[union-attr]
    mean = collector.mean("temp")
    assert mean is not None and 0.8 * expected < mean < 1.2 * expected
    ratio = {
        s.labels["field"]: s.value
        for s in families["privstream_field_error_ratio_to_gamma"].samples
    }
    assert ratio["temp"] > 1.0 and "loyal" not in ratio
    clamped = {s.labels["field"]: s.value for s in families["privstream_field_clamped"].samples}
    assert clamped["temp"] == 100 and clamped["clicks"] == 250


def test_clamped_counts_can_be_turned_off() -> None:
    plan = build_plan(parse_config(CONFIG))
    registry = CollectorRegistry()
    Metrics(registry).describe_plan(plan, clamped_counts=False)
    assert b"privstream_field_clamped" not in generate_latest(registry)


def test_buckets_scale_with_the_mechanism_and_handle_zero_error() -> None:
    assert list(error_buckets(2.0)) == [2.0 * m for m in BUCKET_MULTIPLES]
    assert list(error_buckets(0.0)) == [0.0]
    plan = build_plan(parse_config(CONFIG))
    collector = FieldErrors(plan)
    collector.observe({"temp": Observation(np.array([0.0, 1e9]), 0)})
    assert collector.mean("temp") == pytest.approx(5e8)

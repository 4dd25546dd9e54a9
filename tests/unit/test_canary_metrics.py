"""Error versus gamma from shadow draws: canary inputs through the real release path.

The mechanisms' ``noise_error`` is a function of the noise alone (first
tests); the worker exports it only for canary inputs with noise of their
own (``privstream.pipeline.canary``), never for released values.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
import pytest
from privstream.canary_metrics import BUCKET_MULTIPLES, CanaryErrors, error_buckets
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.mechanisms import LaplaceMechanism, RandomizedResponse
from privstream.mechanisms.gaussian import GaussianMechanism
from privstream.mechanisms.integer_laplace import IntegerLaplaceMechanism
from privstream.mechanisms.vector_gaussian import VectorGaussianMechanism
from privstream.metrics import Metrics
from privstream.pipeline import process_batch
from privstream.pipeline.canary import Canaries
from privstream.pipeline.handlers import CategoricalHandler, IntegerHandler, RealHandler
from privstream.pipeline.results import Observation
from privstream.testing import SeededSource
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.configs import config_dict

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
        {"name": "temp", "kind": "real", "bounds": [0, 40], "mechanism": "laplace",
         "epsilon": 1.0},
        {"name": "clicks", "kind": "integer", "bounds": [0, 10], "epsilon": 1.0},
        {"name": "state", "kind": "categorical", "domain": ["TX", "CA"], "epsilon": 1.0},
        {"name": "loyal", "kind": "categorical", "domain": ["y", "n"], "epsilon": 1.0,
         "memoize_by": "device", "memo_identity_trusted": True},
        {"name": "tags", "kind": "set", "universe": ["a", "b", "c"], "max_items": 2,
         "epsilon": 1.0},
        {"name": "pos", "kind": "vector", "dimension": 3, "l2_bound": 2.0, "epsilon": 1.0,
         "delta": 1e-6},
    ],
    epsilon=7.0,
    delta=1e-6,
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
                "pos": [0.5, 0.0, -0.5],
            }
        ).encode()
        for i in range(n)
    ]


def test_a_batch_result_carries_clamped_counts_and_no_error_of_released_values() -> None:
    """|y - x| of a released value gives x back (y is public): the pipeline must not keep it."""
    assert {f.name for f in dataclasses.fields(Observation)} == {"clamped"}
    plan = build_plan(parse_config(CONFIG))
    seen = process_batch(plan, batch(200), SeededSource(1)).observations
    assert set(seen) == {"temp", "clicks", "state", "loyal", "tags", "pos"}  # not public ones
    assert seen["temp"].clamped == 20 and seen["clicks"].clamped == 50
    assert seen["state"].clamped == 0


def test_canary_inputs_are_fixed_by_the_plan_and_spread_over_bounds_and_domains() -> None:
    plan = build_plan(parse_config(CONFIG))
    canaries = Canaries(plan, count=16)
    # memoized fields are measured too (same mechanism object); sets are not
    assert canaries.fields == ("temp", "clicks", "state", "loyal", "pos")
    by_name = {h.name: h for h in plan.handlers}
    inputs = {c.handler.name: c.inputs for c in canaries._canaries}
    assert inputs == {c.handler.name: c.inputs for c in Canaries(plan, count=16)._canaries}
    assert isinstance(by_name["temp"], RealHandler)
    assert (min(inputs["temp"]), max(inputs["temp"])) == (0.0, 40.0)
    assert len(set(inputs["temp"])) == 16
    assert isinstance(by_name["clicks"], IntegerHandler)

    assert (min(inputs["clicks"]), max(inputs["clicks"])) == (0, 10)
    assert isinstance(by_name["state"], CategoricalHandler)
    assert set(inputs["state"]) == {0, 1}  # every domain position
    norms = np.linalg.norm(np.array(inputs["pos"]), axis=1)
    assert norms.max() == pytest.approx(2.0) and np.all(norms <= 2.0)
    for name, values in inputs.items():  # each is a value its field's parse would accept
        handler = by_name[name]
        assert len(values) == 16, name
        assert handler.release(values, SeededSource(0)).values, name


def test_canary_errors_are_the_mechanism_errors_of_the_release_path() -> None:
    """Same source seed: the canary errors are exactly noise_error of the same release."""
    plan = build_plan(parse_config(CONFIG))
    canaries = Canaries(plan, count=8)
    errors = canaries.draw(SeededSource(3)).errors
    assert set(errors) == set(canaries.fields)
    replay = SeededSource(3)  # the draw's words, in the same order
    for canary in canaries._canaries:
        handler = canary.handler
        mech = handler.mechanism
        assert mech is not None
        values = np.asarray(canary.inputs)
        if handler.name == "pos":
            values = values.reshape(8, 3)
        out = mech.release(values, replay)
        np.testing.assert_array_equal(errors[handler.name], mech.noise_error(values, out))
        assert len(errors[handler.name]) == 8


@pytest.mark.parametrize("eps", [0.1, 1.0, 4.0])
def test_canary_mean_matches_expected_error_and_respects_gamma(eps: float) -> None:
    """Mean of 20,000 canary errors (625 batches of 32) vs the worst-case E|error|.

    ``g|Z|``: its mean has sd at most ``scale/sqrt(N) = 0.7%`` of the scale;
    the worst case adds at most half a grid step (``scale/2^11``). A 5% band
    fails with p < 1e-12.
    """
    field = {"name": "v", "kind": "real", "bounds": [0, 100], "mechanism": "laplace"}
    plan = build_plan(parse_config(config_dict([{**field, "epsilon": eps}], eps)))
    canaries = Canaries(plan, count=32)
    collector = CanaryErrors(plan, canaries.laws)
    source = SeededSource(11)
    for _ in range(N // 32):
        collector.observe(canaries.draw(source).errors)
    mech = plan.handlers[0].mechanism
    assert mech is not None
    mean = collector.mean("v")
    assert mean is not None
    assert mean == pytest.approx(mech.expected_error, rel=0.05)
    assert mean >= mech.gamma_lower_bound


def families(registry: CollectorRegistry) -> dict[str, Any]:
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_exposition_histogram_mean_ratio_from_canaries() -> None:
    plan = build_plan(parse_config(CONFIG))
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.describe_plan(plan, canaries=25, canary_interval_s=0, canary_source=SeededSource(2))
    result = process_batch(plan, batch(1000), SeededSource(2))
    for _ in range(40):  # 40 committed batches: 1000 canaries per field, whatever their size
        metrics.observe_fields(result.observations)
    found = families(registry)
    help_text = found["privstream_field_canary_error"].documentation
    assert "canary" in help_text and "independent of every released record" in help_text
    histogram = found["privstream_field_canary_error"].samples
    temp = [s for s in histogram if s.labels["field"] == "temp"]
    buckets = [s for s in temp if s.name.endswith("_bucket")]
    counts = [s.value for s in buckets]
    assert counts == sorted(counts) and counts[-1] == 40 * 25  # cumulative, all canaries
    assert len(buckets) == len(BUCKET_MULTIPLES) + 1
    expected = plan.handlers[1].mechanism.expected_error  # type: ignore[union-attr]
    assert metrics.canary_errors is not None
    mean = metrics.canary_errors.mean("temp")
    # 1000 draws of g|Z|: relative sd 1/sqrt(1000) = 3.2%; a 20% band is > 6 sd (p < 1e-9)
    assert mean is not None and 0.8 * expected < mean < 1.2 * expected
    ratio = {
        s.labels["field"]: s.value
        for s in found["privstream_field_canary_error_ratio_to_gamma"].samples
    }
    assert ratio["temp"] > 1.0 and "tags" not in ratio and "loyal" in ratio
    counts = {s.labels["field"]: s.value for s in histogram if s.name.endswith("_count")}
    assert counts == dict.fromkeys(("temp", "clicks", "state", "loyal", "pos"), 1000)
    assert not any(name.startswith("privstream_field_clamped") for name in found)  # off


def test_a_round_of_canaries_follows_a_batch_at_most_once_per_interval() -> None:
    """The cost is bounded per second whatever the batch size: batches within the
    interval of the last round draw nothing."""
    plan = build_plan(parse_config(CONFIG))
    now = [100.0]
    metrics = Metrics(CollectorRegistry())
    metrics.describe_plan(plan, canaries=4, canary_interval_s=1.0, clock=lambda: now[0])
    drawn = []
    for t in (100.0, 100.2, 100.99, 101.0, 101.5, 105.0):
        now[0] = t
        metrics.observe_fields({})
        assert metrics.canary_errors is not None
        counts = {
            s.labels["field"]: s.value
            for s in families(metrics.registry)["privstream_field_canary_error"].samples
            if s.name.endswith("_count")
        }
        drawn.append(counts["temp"])
    assert drawn == [4, 4, 4, 8, 8, 12]


def test_measured_fields_export_a_zero_histogram_before_the_first_batch() -> None:
    plan = build_plan(parse_config(CONFIG))
    registry = CollectorRegistry()
    Metrics(registry).describe_plan(plan)
    found = families(registry)
    counts = {
        s.labels["field"]: s.value
        for s in found["privstream_field_canary_error"].samples
        if s.name.endswith("_count")
    }
    assert counts == dict.fromkeys(("temp", "clicks", "state", "loyal", "pos"), 0)
    assert not found["privstream_field_canary_error_mean"].samples  # no mean of nothing


def test_buckets_scale_with_the_mechanism_and_handle_zero_error() -> None:
    assert list(error_buckets(2.0)) == [2.0 * m for m in BUCKET_MULTIPLES]
    assert list(error_buckets(0.0)) == [0.0]
    plan = build_plan(parse_config(CONFIG))
    collector = CanaryErrors(plan, Canaries(plan).laws)
    collector.observe({"temp": np.array([0.0, 1e9])})
    assert collector.mean("temp") == pytest.approx(5e8)

"""Property tests: no input reaches the output as a non-finite or out-of-envelope value.

Every field kind runs through ``process_batch`` on batches mixing doubles up to
``+/-1.7e308``, subnormals down to ``+/-5e-324``, the declared bounds and the
doubles just outside them, integers beyond 2**63 and beyond the double range,
and odd JSON (NaN, 1e999, nested arrays, objects, strings, null). Each record
must come out exactly once: either released, with every number finite and
inside the envelope stated per kind, or dead-lettered with a known reason.

Envelopes are tail bounds on the noise, each failing with probability below
1e-12 per released value (derived at each helper). Hypothesis is derandomized
and the noise is ``SeededSource`` with a fixed seed per example, so the run is
deterministic; over the at most ~10^5 values a run checks, the false-failure
probability is below 1e-7.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from decimal import Decimal, localcontext
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from privstream.cli.main import main
from privstream.config import load_config, parse_config
from privstream.errors import MechanismError
from privstream.kinds import build_plan
from privstream.mechanisms import validation
from privstream.mechanisms.functional import FunctionalMechanism
from privstream.mechanisms.gaussian import GaussianMechanism
from privstream.mechanisms.grid import granularity
from privstream.mechanisms.laplace import LaplaceMechanism
from privstream.mechanisms.unit_interval import UnitIntervalMechanism
from privstream.mechanisms.validation import check_finite
from privstream.mechanisms.vector_gaussian import VectorGaussianMechanism
from privstream.pipeline import RecordPlan, process_batch
from privstream.testing import SeededSource

from tests.support.configs import config_dict

#: per-value tail probability every envelope below is derived for
TAIL = 1e-12
MAX = sys.float_info.max
EDGES = [1.7e308, -1.7e308, MAX, -MAX, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-320, 0.0, -0.0]
HUGE_INTS = [2**63, -(2**63) - 1, 2**64, 2**1023, 10**400, -(10**400)]
#: lines that are not a JSON object with a finite number (NaN, overflow, nesting, garbage)
ODD_LINES = [
    b'{"x": NaN}',
    b'{"x": Infinity}',
    b'{"x": -Infinity}',
    b'{"x": 1e999}',
    b'{"x": -1e999}',
    b'{"x": [[[[1]]]]}',
    b'{"x": {"y": 1}}',
    b'{"x": null}',
    b'{"x": "1"}',
    b"[1]",
    b"{}",
    b"\xff",
    b'{"x": 1',
]
REJECTION_REASONS = {
    "nested_public",
    "invalid_json",
    "invalid_utf8",
    "not_object",
    "missing_field",
    "wrong_type",
    "not_finite",
    "wrong_shape",
    "unknown_category",
    "too_many_items",
}
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _strict_json(raw: bytes) -> Any:
    def refuse(token: str) -> None:
        raise AssertionError(f"non-finite number {token} in the output")

    return json.loads(raw, parse_constant=refuse)


def numbers(lo: float = 0.0, hi: float = 0.0) -> st.SearchStrategy[Any]:
    """Every double (subnormals and +/-1.7e308 included), the bounds and their neighbours."""
    near = [lo, hi, math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf), lo - 1, hi + 1]
    return st.one_of(
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from(EDGES + near),
        st.integers(-(2**70), 2**70),
        st.sampled_from(HUGE_INTS),
    )


ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=4),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)


def _batch(values: Sequence[Any], odd: Sequence[bytes]) -> list[bytes]:
    return [json.dumps({"x": v}).encode() for v in values] + list(odd)


def run(
    plan: RecordPlan, messages: list[bytes], seed: int
) -> tuple[dict[int, Any], dict[int, str]]:
    """Released values and dead-letter reasons by input index; each index exactly once."""
    result = process_batch(plan, messages, SeededSource(seed))
    released = {
        i: _strict_json(out)["x"]
        for i, out in zip(result.output_index, result.outputs, strict=True)
    }
    dead = {d.index: d.reason for d in result.dead_letters}
    assert sorted([*released, *dead]) == list(range(len(messages)))
    assert set(dead.values()) <= REJECTION_REASONS
    return released, dead


def finite_number(value: Any) -> float | None:
    """The value as a finite double if it is a JSON number the pipeline must accept."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def json_double(value: Any) -> float | None:
    """A JSON number as a noised scalar reads it: beyond the double range it is +-inf."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


@cache
def plan_for(field_json: str, epsilon: float = 1.0, delta: float = 1e-6) -> RecordPlan:
    field = {"name": "x", **json.loads(field_json)}
    return build_plan(parse_config(config_dict([field], epsilon=epsilon, delta=delta)))


def _plan(**field: Any) -> RecordPlan:
    return plan_for(json.dumps(field, sort_keys=True))


def laplace_envelope(mech: LaplaceMechanism) -> float:
    """``|y - clamp(x)| <= g (z + 1/2)`` except with probability ``< TAIL``.

    ``y - clamp(x) = g (Z + r)``, ``|r| <= 1/2``; for discrete Laplace with
    ``a = e^(-1/t)``, ``P(|Z| >= z) = 2 a^z / (1 + a) <= 2 e^(-z/t)``, below ``TAIL``
    at ``z = t ln(2 / TAIL)``. ``g t`` is the mechanism's ``scale``.
    """
    return mech.scale * math.log(2.0 / TAIL) + 1.5 * mech.granularity


def gaussian_envelope(sigma: float, g: float, coordinates: int = 1) -> float:
    """Per coordinate ``|y - d| <= sigma sqrt(2 ln(2k / TAIL)) + g``, all k except w.p. ``< TAIL``.

    The discrete Gaussian is subgaussian with its sigma (Canonne, Kamath, Steinke
    2020, Prop. 19): ``P(|Z| >= z) <= 2 e^(-z^2 / (2 sigma^2))``; union over ``k``
    coordinates; the grid offset adds at most ``g``.
    """
    return sigma * math.sqrt(2.0 * math.log(2.0 * coordinates / TAIL)) + g


# --- scalar kinds --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field",
    [
        {"kind": "real", "bounds": [-1000.0, 1000.0], "mechanism": "laplace", "epsilon": 1.0},
        {"kind": "real", "bounds": [0.0, 1.0e289], "mechanism": "laplace", "epsilon": 1.0},
        {"kind": "real", "bounds": [-1e-300, 1e-300], "mechanism": "laplace", "epsilon": 1.0},
        {"kind": "real", "bounds": [0.0, 1.0], "mechanism": "gaussian", "epsilon": 1.0},
        {"kind": "real", "bounds": [-1.0e288, 1.0e288], "mechanism": "gaussian", "epsilon": 1.0},
        {"kind": "real", "bounds": [-1000.0, 1000.0], "mechanism": "piecewise", "epsilon": 1.0},
        {"kind": "real", "bounds": [0.0, 1.0e289], "mechanism": "piecewise", "epsilon": 1.0},
        {"kind": "real", "bounds": [-1e-300, 1e-300], "mechanism": "hybrid", "epsilon": 1.0},
        {"kind": "real", "bounds": [-1.0e288, 1.0e288], "mechanism": "hybrid", "epsilon": 1.0},
    ],
    ids=[
        "laplace",
        "laplace-huge",
        "laplace-tiny",
        "gaussian",
        "gaussian-huge",
        "piecewise",
        "piecewise-huge",
        "hybrid-tiny",
        "hybrid-huge",
    ],
)
@SETTINGS
@given(data=st.data())
def test_real_fields_release_finite_values_near_the_clamped_input(
    field: dict[str, Any], data: st.DataObject
) -> None:
    plan = _plan(**{**field, "delta": 1e-6 if field["mechanism"] == "gaussian" else 0.0})
    mech = plan.handlers[0].mechanism
    lo, hi = field["bounds"]
    values = data.draw(st.lists(st.one_of(numbers(lo, hi), ODD_VALUES), min_size=1, max_size=12))
    odd = data.draw(st.lists(st.sampled_from(ODD_LINES), max_size=3))
    released, dead = run(plan, _batch(values, odd), data.draw(st.integers(0, 2**32)))
    if isinstance(mech, LaplaceMechanism):
        envelope = laplace_envelope(mech)
    elif isinstance(mech, UnitIntervalMechanism):  # every report lies within mid +/- half reach
        envelope = mech.half * (mech.reach + 1.0) * (1.0 + 1e-12)
    else:
        assert isinstance(mech, GaussianMechanism)
        envelope = gaussian_envelope(mech.sigma, 2.0 * mech.granularity)
    for i, value in enumerate(values):
        number = json_double(value)  # beyond the double range: clamped, never dead-lettered
        if number is None:
            assert dead[i] == "wrong_type"
            continue
        y = released[i]
        assert isinstance(y, float) and math.isfinite(y)
        assert abs(y - min(max(number, lo), hi)) <= envelope


@SETTINGS
@given(data=st.data())
def test_integer_fields_release_integers_near_the_clamped_input(data: st.DataObject) -> None:
    lo, hi = -1000, 1000
    plan = _plan(kind="integer", bounds=[lo, hi], epsilon=0.5)
    # P(|Z| >= z) <= 2 e^(-z/t) for discrete Laplace with parameter t (see laplace_envelope)
    t = float(plan.handlers[0].mechanism.params()["scale"])  # type: ignore[union-attr]
    envelope = t * math.log(2.0 / TAIL)
    values = data.draw(st.lists(st.one_of(numbers(lo, hi), ODD_VALUES), min_size=1, max_size=12))
    released, dead = run(plan, _batch(values, ()), data.draw(st.integers(0, 2**32)))
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int | float):
            assert dead[i] == "wrong_type"
            continue
        # every number is released: a fraction is rounded (ties to even), then clamped
        y = released[i]
        assert type(y) is int
        assert abs(y - min(max(round(value), lo), hi)) <= envelope


DOMAIN = ["a", "b", 7, 2**40]


@SETTINGS
@given(data=st.data())
def test_categorical_and_boolean_fields_release_domain_values(data: st.DataObject) -> None:
    categorical = _plan(kind="categorical", domain=DOMAIN, epsilon=1.0)
    boolean = _plan(kind="boolean", epsilon=1.0)
    values = data.draw(
        st.lists(st.one_of(st.sampled_from(DOMAIN), numbers(), ODD_VALUES), min_size=1, max_size=12)
    )
    seed = data.draw(st.integers(0, 2**32))
    released, dead = run(categorical, _batch(values, ODD_LINES[:2]), seed)
    for i, value in enumerate(values):
        known = not isinstance(value, bool) and any(
            type(value) is type(d) and value == d for d in DOMAIN
        )
        if known:
            assert released[i] in DOMAIN
        else:
            assert dead[i] in {"wrong_type", "unknown_category"}
    released, dead = run(boolean, _batch(values, ODD_LINES[:2]), seed)
    for i, value in enumerate(values):
        if isinstance(value, bool):
            assert type(released[i]) is bool
        else:
            assert dead[i] == "wrong_type"


UNIVERSE = ["u", "v", "w", "z"]


@SETTINGS
@given(data=st.data())
def test_set_and_hashed_fields_release_their_shapes(data: st.DataObject) -> None:
    sets = _plan(kind="set", universe=UNIVERSE, max_items=2, epsilon=1.0, delta=0.0)
    hashed = _plan(kind="categorical", mechanism="local_hashing", epsilon=1.0, delta=0.0)
    items = st.one_of(st.sampled_from(UNIVERSE), numbers(), st.text(max_size=3))
    values = data.draw(
        st.lists(st.one_of(st.lists(items, max_size=4), numbers(), ODD_VALUES), max_size=10)
    )
    seed = data.draw(st.integers(0, 2**32))
    released, _ = run(sets, _batch(values, ODD_LINES[:3]), seed)
    for i, value in released.items():
        assert isinstance(values[i], list) and len(set(values[i])) <= 2
        assert len(set(value)) == len(value) and set(value) <= set(UNIVERSE)
    buckets = hashed.handlers[0].mechanism.params()["buckets"]  # type: ignore[union-attr]
    released, dead = run(hashed, _batch(values, ODD_LINES[:3]), seed)
    for i, value in enumerate(values):
        if isinstance(value, str):
            report = released[i]
            assert set(report) == {"seed", "bucket"}
            assert isinstance(report["bucket"], int) and 0 <= report["bucket"] < int(buckets)
        else:
            assert dead[i] == "wrong_type"


@SETTINGS
@given(data=st.data())
def test_public_fields_copy_finite_scalars_and_refuse_the_rest(data: st.DataObject) -> None:
    plan = _plan(kind="public")
    values = data.draw(st.lists(st.one_of(numbers(), ODD_VALUES), min_size=1, max_size=12))
    released, dead = run(plan, _batch(values, ODD_LINES), data.draw(st.integers(0, 2**32)))
    for i, value in enumerate(values):
        if isinstance(value, list | dict):  # public means scalar (allow_nested is off)
            assert dead[i] == "nested_public"
        else:
            assert released[i] == value  # a copy, finite like every JSON number read


# --- vectors and functions ------------------------------------------------------------------


def clip_reference(row: Sequence[float], radius: float) -> list[float]:
    """``x min(1, R / ||x||_2)`` in 60-digit decimal arithmetic (no overflow, independent)."""
    with localcontext() as ctx:
        ctx.prec = 60
        exact = [Decimal(v) for v in row]
        norm = sum(v * v for v in exact).sqrt()
        if norm <= Decimal(radius):
            return [float(v) for v in row]
        return [float(v * Decimal(radius) / norm) for v in exact]


def vectors(k: int) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(numbers(), min_size=k, max_size=k),
        st.lists(st.sampled_from([1.7e308, -1.7e308, MAX, 5e-324]), min_size=k, max_size=k),
        st.lists(numbers(), max_size=k + 1),
        ODD_VALUES,
    )


def accepted_row(value: Any, k: int) -> list[float] | None:
    """The row the mechanism gets: beyond the double range, the largest double of its sign."""
    if not isinstance(value, list) or len(value) != k:
        return None
    row = [json_double(v) for v in value]
    if any(v is None for v in row):
        return None
    return [math.copysign(MAX, v) if math.isinf(v) else v for v in row]  # type: ignore[arg-type]


def check_rows(
    plan: RecordPlan, values: list[Any], seed: int, check: Callable[[list[float], Any], None]
) -> None:
    k = plan.handlers[0].dimension  # type: ignore[attr-defined]
    released, dead = run(plan, _batch(values, ODD_LINES[:4]), seed)
    for i, value in enumerate(values):
        row = accepted_row(value, k)
        if row is None:
            assert dead[i] in {"wrong_type", "wrong_shape"}
        else:
            y = released[i]
            assert len(y) == k and all(isinstance(c, float) and math.isfinite(c) for c in y)
            check(row, y)


@SETTINGS
@given(data=st.data())
def test_vector_fields_release_near_the_clipped_vector(data: st.DataObject) -> None:
    plan = _plan(kind="vector", dimension=4, l2_bound=3.0, epsilon=1.0, delta=1e-6)
    mech = plan.handlers[0].mechanism
    assert isinstance(mech, VectorGaussianMechanism)
    # ||y - clip(x)||_2 <= sqrt(k) * per-coordinate envelope, all coordinates w.p. >= 1 - TAIL
    envelope = 2.0 * gaussian_envelope(mech.sigma, mech.granularity, 4)

    def check(row: list[float], y: Any) -> None:
        target = clip_reference(row, mech.l2_bound)
        assert math.dist(y, target) <= envelope

    values = data.draw(st.lists(vectors(4), min_size=1, max_size=10))
    check_rows(plan, values, data.draw(st.integers(0, 2**32)), check)


def _functional_plan(points: int) -> RecordPlan:
    grid = [round(j / (points - 1), 6) for j in range(points)]
    return _plan(
        kind="functional", grid=grid, bandwidth=0.2, rkhs_radius=1.0, epsilon=0.9, delta=1e-6
    )


@pytest.mark.parametrize("points", [5, 100])
@SETTINGS
@given(data=st.data())
def test_functional_fields_release_inside_the_rkhs_envelope(
    points: int, data: st.DataObject
) -> None:
    plan = _functional_plan(points)
    mech = plan.handlers[0].mechanism
    assert isinstance(mech, FunctionalMechanism)
    # A = M + lambda I from the kernel formula; y = L w_hat with ||w_hat||_2 <= R + noise, so
    # sqrt(y^T A^-1 y) = ||w_hat||_2 and |y_i| <= sqrt(1 + lambda) ||w_hat||_2 (row norms of L)
    x = np.asarray(mech.grid_points)
    gram = np.exp(-((x[:, None] - x[None, :]) ** 2) / (2.0 * 0.2**2)) + mech.jitter * np.eye(points)
    noise = math.sqrt(points) * gaussian_envelope(mech.sigma, mech.granularity, points)
    envelope = mech.rkhs_radius * (1 + 1e-9) + noise

    def check(row: list[float], y: Any) -> None:
        out = np.asarray(y)
        # 1e-3: solving with the near-singular A loses up to cond(A) * 2^-53 ~ 1e-6 relative
        assert math.sqrt(float(out @ np.linalg.solve(gram, out))) <= envelope * (1 + 1e-3)
        assert float(np.max(np.abs(out))) <= math.sqrt(1.0 + mech.jitter) * envelope * (1 + 1e-3)

    values = data.draw(st.lists(vectors(points), min_size=1, max_size=6))
    check_rows(plan, values, data.draw(st.integers(0, 2**32)), check)


# --- mechanism level -----------------------------------------------------------------------


def test_vector_whose_norm_overflows_is_clipped_onto_the_sphere_not_to_zero() -> None:
    mech = VectorGaussianMechanism(dimension=5, l2_bound=2.0, epsilon=1.0, delta=1e-6)
    rows = np.array(
        [
            [1.7e308, -1.7e308, 1.7e308, -1.7e308, 1.7e308],  # ||x|| = 3.8e308: beyond doubles
            [1e200, 0.0, 0.0, 0.0, 0.0],  # squares overflow, norm does not
            [5e-324, -5e-324, 0.0, 0.0, 5e-324],  # subnormal: inside, unchanged
            [0.0] * 5,
        ]
    )
    clipped = mech.clip(rows)
    for row, out in zip(rows, clipped, strict=True):
        assert out.tolist() == pytest.approx(clip_reference(row.tolist(), 2.0), rel=1e-12)
    assert math.hypot(*clipped[0]) == pytest.approx(2.0, rel=1e-12)
    assert clipped[2].tolist() == rows[2].tolist() and clipped[3].tolist() == [0.0] * 5
    released = mech.release(rows, SeededSource(5))
    assert np.all(np.isfinite(released))
    # noise_error is g ||Z||_2, finite and of the noise's size (sigma ~ 8.4 here)
    errors = mech.noise_error(rows, released)
    assert np.all(np.isfinite(errors)) and float(np.max(errors)) < 1e3


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_vector_release_refuses_non_finite_input(bad: float) -> None:
    mech = VectorGaussianMechanism(dimension=3, l2_bound=1.0, epsilon=1.0, delta=1e-6)
    rows = np.array([[0.0, bad, 1.0], [bad, bad, 0.0]])
    with pytest.raises(MechanismError, match="3 input value"):
        mech.release(rows, SeededSource(1))


def test_check_finite_counts_without_quoting() -> None:
    assert check_finite(np.array([1.0, -1.7e308, 5e-324]), "f").tolist() == [1.0, -1.7e308, 5e-324]
    with pytest.raises(MechanismError) as info:
        check_finite(np.array([[1.25, math.nan], [math.inf, 2.5]]), "salary")
    assert "salary: 2 input value(s)" in str(info.value)
    assert "1.25" not in str(info.value) and "2.5" not in str(info.value)


# --- through the CLI -----------------------------------------------------------------------

FUNCTIONAL_CONFIG = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 0.9, delta: 1.0e-6}
fields:
  - name: c
    kind: functional
    grid: [0, 0.25, 0.5, 0.75, 1]
    bandwidth: 0.2
    rkhs_radius: 1
    epsilon: 0.9
    delta: 1.0e-6
"""


def test_issue_reproduction_huge_function_is_clipped_to_normal_magnitude(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 11: the second line came out near +/-1e17 (NaN norm never > R, int64 cast)."""
    config = tmp_path / "privstream.yaml"
    config.write_text(FUNCTIONAL_CONFIG, encoding="utf-8")
    source, out, dead = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "dead.jsonl"
    source.write_text(
        '{"c":[0,0,0,0,0]}\n{"c":[1.7e308,-1.7e308,1.7e308,-1.7e308,1.7e308]}\n', encoding="utf-8"
    )
    argv = ["sanitize", "--config", str(config), "--input", str(source), "--output", str(out)]
    assert main([*argv, "--dead-letter", str(dead)]) == 0
    assert "2 records in, 2 sanitized, 0 dead-lettered" in capsys.readouterr().err
    assert not dead.exists()
    mech = build_plan(load_config(config)).handlers[0].mechanism
    assert isinstance(mech, FunctionalMechanism)
    # |y_i| <= sqrt(1 + lambda) (R + sqrt(k) per-coordinate envelope), w.p. >= 1 - TAIL each
    noise = math.sqrt(5) * gaussian_envelope(mech.sigma, mech.granularity, 5)
    bound = math.sqrt(1.0 + mech.jitter) * (mech.rkhs_radius + noise)
    lines = [_strict_json(line)["c"] for line in out.read_bytes().splitlines()]
    assert len(lines) == 2
    for values in lines:
        assert len(values) == 5 and max(abs(v) for v in values) <= bound
    assert bound < 300  # normal magnitude: sigma ~ 12, not 1e17


@pytest.mark.parametrize(
    ("field", "where", "says"),
    [
        ("{name: x, kind: real, bounds: [-1.0e308, 1.0e308], epsilon: 1}", "(x).bounds", "2**1002"),
        ("{name: x, kind: real, bounds: [0, 1.0e-320], epsilon: 1}", "(x)", "2**-1012"),
        ("{name: x, kind: real, bounds: [0, 1000], epsilon: 1.0e-300}", "(x)", "2**962"),
        ("{name: x, kind: vector, dimension: 3, l2_bound: 1.0e308, epsilon: 1, delta: 1.0e-6}",
         "(x).l2_bound", "2**1002"),
        ("{name: x, kind: functional, grid: [0, 1], bandwidth: 1, rkhs_radius: 1.0e-320, "
         "epsilon: 1, delta: 1.0e-6}", "(x)", "2**-1012"),
    ],
)  # fmt: skip
def test_extreme_configs_exit_2_naming_the_field_and_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, where: str, says: str
) -> None:
    config = tmp_path / "privstream.yaml"
    config.write_text(
        "kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}\n"
        "privacy: {epsilon: 1, delta: 1.0e-6}\n"
        f"fields:\n  - {field}\n",
        encoding="utf-8",
    )
    with pytest.raises(SystemExit) as info:
        main(["explain", "--config", str(config)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"privstream: config error: fields[0] {where}: ")
    assert says in err and "Traceback" not in err


def test_the_numeric_limits_match_the_grid_and_keep_every_product_finite() -> None:
    """The derivation in ``mechanisms.validation``, checked against ``grid.granularity``."""
    top = 2.0**validation.MAX_GRID_EXPONENT
    for below in (math.nextafter(validation.MAX_NOISE_SCALE, 0.0), 0.75 * 2.0**962):
        assert granularity(below, validation.MAX_MAGNITUDE) == top
        assert validation.grid_exponent(below, validation.MAX_MAGNITUDE) == 952
    # why the margin: log2 of the double just below 2^963 rounds to 963, giving 2^953
    assert granularity(math.nextafter(2.0**963, 0.0), 1.0) == 2.0 * top
    assert granularity(validation.MIN_NOISE_SCALE, 0.0) == 2.0**validation.MIN_GRID_EXPONENT
    g = 2.0**validation.MAX_GRID_EXPONENT
    # int64 index times g; through L (<= 2^69.5 g); a vector's noise norm (<= 2^71 g)
    for factor in (2.0**63, 2.0**69.5, 2.0**71):
        assert math.isfinite(factor * g) and factor * g <= 2.0**1023
    assert math.isinf(2.0**71 * (2.0 * g))  # one binade more and the vector bound overflows

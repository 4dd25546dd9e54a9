"""The audit's worst-case inputs and test-set families (``privstream.audit.targets``).

The audit can only catch a leak at the inputs it tries: these tests check the
claims of the module docstring against the mechanisms' own laws, not against
the code that picks them (the privacy cost of a set pair, the RKHS norm of the
functional point, the L2 norm of the vector point), plus what each target does
with the outputs it is handed.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from privstream.audit.by_kind import target_for
from privstream.audit.targets import (
    MAX_CATEGORIES,
    FiniteTarget,
    HashedTarget,
    ProjectionTarget,
    RealTarget,
    SetTarget,
    spread_codes,
)
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.pipeline.plan import PlannedField

from tests.support.configs import config_dict


def planned(spec: dict[str, Any], delta: float = 0.0) -> PlannedField:
    (field,) = build_plan(parse_config(config_dict([spec], epsilon=20.0, delta=delta))).fields
    return field


def test_real_fields_are_audited_at_their_bounds() -> None:
    for mechanism in ("laplace", "piecewise", "hybrid"):
        spec = {"name": "x", "kind": "real", "bounds": [-3, 70], "epsilon": 1.0}
        target = target_for(planned({**spec, "mechanism": mechanism}))
        assert isinstance(target, RealTarget)
        assert target.inputs == (-3.0, 70.0), mechanism
        assert target.needs_pilot
    integer = target_for(planned({"name": "n", "kind": "integer", "bounds": [2, 9], "epsilon": 1}))
    assert tuple(integer.inputs) == (2, 9)


@pytest.mark.parametrize("size", [1, 2, 5, 8, 9, 16, 1000])
def test_spread_codes_take_every_value_or_eight_spread_ones(size: int) -> None:
    codes = spread_codes(size)
    if size <= MAX_CATEGORIES:
        assert codes == tuple(range(size))
        return
    assert len(codes) == MAX_CATEGORIES
    assert codes[0] == 0 and codes[-1] == size - 1  # the ends of an ordinal domain
    assert list(codes) == sorted(set(codes))
    gaps = np.diff(codes)
    assert gaps.max() - gaps.min() <= 1  # evenly spread


def test_a_finite_target_reads_values_by_type_and_value() -> None:
    field = planned({"name": "c", "kind": "categorical", "domain": ["1", 1, "a"], "epsilon": 1})
    target = target_for(field)
    assert isinstance(target, FiniteTarget)
    assert set(target.inputs) == {"1", 1, "a"}
    codes = target.convert(["1", 1, "a", 1])
    domain = list(target.domain)
    assert codes.tolist() == [domain.index("1"), domain.index(1), domain.index("a"), codes[1]]
    assert codes[0] != codes[1]  # "1" and 1 are different values
    # every singleton and its complement, each once
    events = target.events(None, range(3))
    assert len(events) == 6


def test_booleans_are_audited_on_false_and_true() -> None:
    target = target_for(planned({"name": "b", "kind": "boolean", "epsilon": 1.0}))
    assert tuple(target.inputs) == (False, True)


def test_local_hashing_is_audited_on_two_distinct_values_with_supports_events() -> None:
    target = target_for(planned({"name": "h", "kind": "categorical",
                                 "mechanism": "local_hashing", "epsilon": 2.0}))  # fmt: skip
    assert isinstance(target, HashedTarget)
    first, second = target.inputs
    assert first != second
    assert target.digests[0] != target.digests[1]
    rows = target.convert([{"seed": 3, "bucket": 1}, {"seed": 2**63 + 5, "bucket": 0}])
    assert rows.shape == (2, 2) and rows[1, 0] == 2**63 + 5
    assert len(target.events(None, [0, 1])) == 8  # 2 inputs x (supports, only) x (it, not)


def _unary_cost(e1: float, a: int, b: int) -> float:
    """OUE privacy cost of sets differing in ``a`` then ``b`` items, from the bit law.

    Optimized unary encoding (Wang et al. 2017) keeps a 1 with p = 1/2 and
    turns a 0 into 1 with q = 1 / (e^e1 + 1). Its worst output sets each bit
    where A and B differ to the value with the largest ratio: a bit that is
    1 under A and 0 under B at 1 costs ln(p / q) = ln((e^e1 + 1) / 2); one
    that is 0 under A and 1 under B at 0 costs ln((1 - q) / (1 - p)).
    """
    p, q = 0.5, 1.0 / (math.exp(e1) + 1.0)
    return a * math.log(p / q) + b * math.log((1.0 - q) / (1.0 - p))


@pytest.mark.parametrize(("universe", "max_items"), [(2, 1), (5, 2), (6, 3), (7, 5), (3, 3)])
def test_the_set_pair_has_the_largest_privacy_cost_of_all_admissible_pairs(
    universe: int, max_items: int
) -> None:
    field = planned({"name": "s", "kind": "set", "universe": [f"i{j}" for j in range(universe)],
                     "max_items": max_items, "epsilon": 1.0})  # fmt: skip
    target = target_for(field)
    assert isinstance(target, SetTarget)
    a, b = len(target.first), len(target.second)
    assert not set(target.first) & set(target.second)
    admissible = [
        (x, y) for x, y in itertools.product(range(max_items + 1), repeat=2) if x + y <= universe
    ]
    for e1 in (0.1, 1.0, 3.0):
        best = max(_unary_cost(e1, x, y) for x, y in admissible)
        assert _unary_cost(e1, a, b) == pytest.approx(best)


def test_set_outputs_keep_the_touched_items_and_one_other_bit() -> None:
    field = planned({"name": "s", "kind": "set", "universe": ["p", "q", "r", "z"],
                     "max_items": 1, "epsilon": 1.0})  # fmt: skip
    target = target_for(field)
    assert isinstance(target, SetTarget)
    bits = target.convert([["p"], ["q"], ["z"], []])
    assert bits.shape == (4, 3)  # p, q and "some other item"
    assert bits.tolist() == [
        [True, False, False],
        [False, True, False],
        [False, False, True],
        [False, False, False],
    ]


def test_the_vector_point_is_on_the_ball_and_opposite() -> None:
    field = planned({"name": "v", "kind": "vector", "dimension": 3, "l2_bound": 2.5,
                     "epsilon": 1.0, "delta": 1e-6}, delta=1e-3)  # fmt: skip
    target = target_for(field)
    assert isinstance(target, ProjectionTarget)
    plus, minus = (np.asarray(v) for v in target.inputs)
    assert float(np.linalg.norm(plus)) == pytest.approx(2.5)
    assert np.array_equal(minus, -plus)
    projected = target.convert([[1.0, 2.0, 3.0]])
    assert projected.tolist() == [[1.0]]  # <y, e1>


def test_the_functional_point_has_rkhs_norm_r_and_is_opposite() -> None:
    field = planned({"name": "f", "kind": "functional", "grid": [0.0, 0.5, 1.0],
                     "bandwidth": 0.5, "rkhs_radius": 1.5, "epsilon": 0.9, "delta": 1e-6},
                    delta=1e-3)  # fmt: skip
    target = target_for(field)
    assert isinstance(target, ProjectionTarget)
    plus, minus = (np.asarray(v, dtype=np.float64) for v in target.inputs)
    mechanism: Any = field.handler.mechanism
    norms = mechanism.rkhs_norm(np.stack([plus, minus]))
    assert norms.tolist() == pytest.approx([1.5, 1.5])
    assert np.array_equal(minus, -plus)

"""Red team (issue 29, parts 3-4): no value decides a release by being long or unencodable.

Attacks, each as a JSON token in a record: integers of 4,301 and 10,000
digits (either sign: more than ``sys.get_int_max_str_digits()``, which the
stdlib refused, dead-lettering the record), floats with huge exponents, and
strings holding a lone surrogate (``"\\ud800"``, valid JSON: local hashing
refused it). Each is set beside an *ordinary* value of its class for the
field: an out-of-range number of the same sign (clamped), or an unknown
value (``unknown_as``). In every noised kind, on both paths
(``process_batch`` and the reference), the batch holding the attack must
have the fate of the batch holding the ordinary value: the same records
released and the same dead-letter reasons, and the same output bytes where
both values are clamped or replaced alike (the noise is seeded, so equal
inputs to the mechanism give equal outputs); local hashing and public fields,
which release the value itself, must give outputs of the same shape.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import RecordPlan, process_batch
from privstream.pipeline.long_integers import LongInteger
from privstream.pipeline.noise import Replayable
from privstream.pipeline.parse import decode_record
from privstream.pipeline.plan import field_identity
from privstream.pipeline.reference import process_batch_reference
from privstream.pipeline.results import BatchResult
from privstream.testing import SeededSource

from tests.support.configs import config_dict

LONG = {
    "long+": ["9" * 4301, "1" + "0" * 9999],
    "long-": ["-" + "9" * 4301, "-1" + "0" * 9999],
}
ATTACKS: dict[str, list[str]] = {
    **LONG,
    "float+": ["1e99999999999", "1E+" + "9" * 400, "12345678901234567890e999999"],
    "float-": ["-1e99999999999", "-0.5e" + "9" * 400],
    "lone": ['"\\ud800"', '"x\\udfffy"', '"\\udbff"'],
}
#: the ordinary value of each class, unless a field names its own
NUMBER = {"long+": "1000", "long-": "-1000", "float+": "1e300", "float-": "-1e300",
          "lone": '"zzz"'}  # fmt: skip
UNKNOWN = {**NUMBER, "long+": "12345", "long-": "-12345"}


def field(spec: dict[str, Any], ordinary: dict[str, str], exact: bool = True,
          template: str = "{}") -> tuple[dict[str, Any], dict[str, str], bool, str]:  # fmt: skip
    return {"name": "x", **spec}, ordinary, exact, template


REAL = {"kind": "real", "bounds": [-10.0, 10.0], "epsilon": 1.0}
DOMAIN = ["a", "b", "c"]
FIELDS = {
    "integer": field({"kind": "integer", "bounds": [0, 100], "epsilon": 1.0}, NUMBER),
    "laplace": field({**REAL, "mechanism": "laplace"}, NUMBER),
    "gaussian": field({**REAL, "mechanism": "gaussian", "delta": 1e-6}, NUMBER),
    "piecewise": field({**REAL, "mechanism": "piecewise"}, NUMBER),
    "hybrid": field({**REAL, "mechanism": "hybrid"}, NUMBER),
    "real_auto": field({**REAL, "mechanism": "auto"}, NUMBER),
    "vector": field(
        {"kind": "vector", "dimension": 3, "l2_bound": 1.0, "epsilon": 1.0, "delta": 1e-6},
        {**NUMBER, "long+": "1e999", "long-": "-1e999"}, template="[0.5, {}, -0.25]",
    ),
    "functional": field(
        {"kind": "functional", "grid": [0.0, 0.5, 1.0], "bandwidth": 0.5, "rkhs_radius": 1.0,
         "epsilon": 0.9, "delta": 1e-6},
        {**NUMBER, "long+": "1e999", "long-": "-1e999"}, template="[0.5, {}, -0.25]",
    ),
    "rr": field({"kind": "categorical", "domain": DOMAIN, "unknown_as": "a", "epsilon": 1.0},
                UNKNOWN),
    "rr_int_domain": field({"kind": "categorical", "domain": [1, 2, 3], "unknown_as": 1,
                            "epsilon": 1.0}, UNKNOWN),
    "rr_no_unknown_as": field({"kind": "categorical", "domain": DOMAIN, "epsilon": 1.0},
                              UNKNOWN),
    "exponential": field({"kind": "categorical", "mechanism": "exponential", "domain": DOMAIN,
                          "unknown_as": "b", "epsilon": 1.0}, UNKNOWN),
    "unary": field({"kind": "categorical", "mechanism": "unary_encoding", "domain": DOMAIN,
                    "unknown_as": "c", "epsilon": 1.0}, UNKNOWN),
    "auto_local_hashing": field({"kind": "categorical", "mechanism": "auto",
                                 "domain": [f"w{i}" for i in range(1000)], "unknown_as": "w7",
                                 "epsilon": 1.0}, UNKNOWN),
    "local_hashing": field({"kind": "categorical", "mechanism": "local_hashing",
                            "epsilon": 2.0}, UNKNOWN, exact=False),
    "boolean": field({"kind": "boolean", "epsilon": 1.0}, UNKNOWN),
    "set": field({"kind": "set", "universe": DOMAIN, "max_items": 2, "on_unknown": "drop",
                  "epsilon": 1.0}, UNKNOWN, template='["a", {}]'),
    "public": field({"kind": "public"}, {**NUMBER, "long+": "1e999", "long-": "-1e999",
                                         "float+": "1e999", "float-": "-1e999"}, exact=False),
}  # fmt: skip
PATHS: dict[str, Callable[..., BatchResult]] = {
    "process_batch": process_batch,
    "reference": process_batch_reference,
}
SETTINGS = settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@cache
def plan_of(name: str) -> RecordPlan:
    spec = FIELDS[name][0]
    fields = [{"name": "seq", "kind": "public"}, spec]
    return build_plan(parse_config(config_dict(fields, epsilon=2.0, delta=1e-5)))


def batch(name: str, token: str, at: int, size: int) -> list[bytes]:
    """``size`` ordinary in-range records with ``token`` in field ``x`` of record ``at``."""
    template = FIELDS[name][3]
    plain = {"integer": "50", "boolean": "true", "set": '"b"', "public": "7"}.get(name, '"a"')
    if name in ("laplace", "gaussian", "piecewise", "hybrid", "real_auto"):
        plain = "1.5"
    elif name in ("vector", "functional"):
        plain = "0.1"
    elif name == "rr_int_domain":
        plain = "2"
    values = [template.format(token if i == at else plain) for i in range(size)]
    return [f'{{"seq": {i}, "x": {v}}}'.encode() for i, v in enumerate(values)]


def fate(result: BatchResult, exact: bool) -> tuple[list[Any], dict[int, str]]:
    """Released records (their bytes, or their shape) and dead-letter reasons by index."""
    if exact:
        released: list[Any] = list(zip(result.output_index, result.outputs, strict=True))
    else:
        released = [
            (index, _shape(json.loads(out)["x"]))
            for index, out in zip(result.output_index, result.outputs, strict=True)
        ]
    return released, {d.index: d.reason for d in result.dead_letters}


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: type(item).__name__ for key, item in value.items()}
    return type(value).__name__


def cases() -> Iterator[tuple[str, str, str]]:
    for name in FIELDS:
        for kind, tokens in ATTACKS.items():
            for token in tokens:
                yield name, kind, token


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("name", "kind", "token"), list(cases()))
def test_an_attack_has_the_fate_of_an_ordinary_value(
    path: str, name: str, kind: str, token: str
) -> None:
    _, ordinary, exact, _ = FIELDS[name]
    run = PATHS[path]
    plan = plan_of(name)
    attacked = run(plan, batch(name, token, 2, 5), SeededSource(11))
    plain = run(plan, batch(name, ordinary[kind], 2, 5), SeededSource(11))
    assert fate(attacked, exact) == fate(plain, exact)


@pytest.mark.parametrize("name", ["integer", "laplace", "rr", "auto_local_hashing", "vector"])
@SETTINGS
@given(
    kind=st.sampled_from(sorted(ATTACKS)),
    pick=st.integers(0, 2),
    at=st.integers(0, 6),
    seed=st.integers(0, 2**32),
)
def test_both_paths_agree_wherever_the_attack_sits(
    name: str, kind: str, pick: int, at: int, seed: int
) -> None:
    """Keyed noise (the worker's): the fast path equals the reference byte for byte, and the
    attack's record is released or refused exactly as the ordinary value's."""
    tokens = ATTACKS[kind]
    token = tokens[pick % len(tokens)]
    _, ordinary, exact, _ = FIELDS[name]
    plan = plan_of(name)
    fates = []
    for value in (token, ordinary[kind]):
        messages = batch(name, value, at, 7)
        fast = process_batch(plan, messages, _keyed(messages, seed))
        reference = process_batch_reference(plan, messages, _keyed(messages, seed))
        assert fast.outputs == reference.outputs
        assert fate(fast, exact) == fate(reference, exact)
        released, dead = fate(fast, exact=False)
        fates.append(([index for index, _ in released], dead))
    assert fates[0] == fates[1]


def _keyed(messages: list[bytes], seed: int) -> Replayable:
    n = len(messages)
    offsets = np.arange(seed, seed + n, dtype=np.int64)
    return Replayable(NoiseKeys(bytes(range(32)), "raw"), np.zeros(n, np.int64), offsets, messages)


def test_a_long_integer_is_decided_by_sign_and_digit_count_in_linear_time() -> None:
    """10 MB of digits never reaches ``int()`` (quadratic), even with the limit lifted."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        digits = "7" * 10_000_000
        for sign in ("", "-"):
            value = decode_record(f'{{"x": {sign}{digits}}}'.encode())["x"]
            assert type(value) is LongInteger and value.text == sign + digits
            assert (value > 0) == (sign == "")
    finally:
        sys.set_int_max_str_digits(before)


def test_a_long_integer_memo_identity_is_its_digits() -> None:
    """A drop field naming the device: a 5,000-digit id is an identity like a 5-digit one, and
    two such ids are two identities."""
    spec = {"name": "x", "kind": "categorical", "domain": DOMAIN, "epsilon": 1.0,
            "memoize_by": "dev", "memo_identity_trusted": True}  # fmt: skip
    config = config_dict([{"name": "dev", "kind": "drop"}, spec], epsilon=1.0)
    plan = build_plan(parse_config(config))
    long_ids = ["9" * 5000, "8" * 5000]
    messages = [f'{{"dev": {d}, "x": "a"}}'.encode() for d in [*long_ids, "12345"]]
    for run in PATHS.values():
        result = run(plan, messages, SeededSource(3))
        assert result.output_index == [0, 1, 2] and not result.dead_letters
    identities = [field_identity(decode_record(m)["dev"]) for m in messages]
    assert identities == [d.encode() for d in [*long_ids, "12345"]]

"""The ``timestamp`` kind: parsing, truncation, value-independent release, DP, config errors."""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from privstream.audit import audit
from privstream.cli.explain import explain, explain_data
from privstream.config import parse_config
from privstream.config.timestamps import parse_iso
from privstream.errors import ConfigError, Rejected
from privstream.kinds import build_plan
from privstream.kinds.timestamp import TimestampHandler
from privstream.mechanisms.integer_laplace import IntegerLaplaceMechanism
from privstream.pipeline import RecordPlan, process_batch
from privstream.pipeline.reference import process_batch_reference
from privstream.testing import SeededSource

from tests.support.configs import config_dict

JAN = ["2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"]  # 24 hours
NOISED = {"name": "ts", "kind": "timestamp", "granularity": "1h", "bounds": JAN, "epsilon": 1.0}
H = 3600  # seconds


def plan(**options: Any) -> RecordPlan:
    field = {"name": "ts", "kind": "timestamp", **options}
    return build_plan(parse_config(config_dict([field], epsilon=1.0)))


def handler(**options: Any) -> TimestampHandler:
    built = plan(**{"granularity": "1h", **options}).handlers[0]
    assert isinstance(built, TimestampHandler)
    return built


def start_of(text: str, **options: Any) -> str:
    """What the public variant releases for one value: the ISO start of its unit."""
    h = handler(**options)
    return str(h.release([h.parse(text)], SeededSource(0)).values[0])


# --- parsing every accepted form ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "released"),
    [
        ("2026-11-28T04:20:00Z", "2026-11-28T04:00:00Z"),
        ("2026-11-28t04:20:00z", "2026-11-28T04:00:00Z"),
        ("2026-11-28 04:20:00Z", "2026-11-28T04:00:00Z"),
        ("2026-11-28T04:20Z", "2026-11-28T04:00:00Z"),
        ("2026-11-28T04:59:59.999999Z", "2026-11-28T04:00:00Z"),
        ("2026-11-28T04:59:59.999999999Z", "2026-11-28T04:00:00Z"),  # nanoseconds truncated
        ("2026-11-28T04:20:00.5+00:00", "2026-11-28T04:00:00Z"),
        ("2026-11-28T05:20:00+01:00", "2026-11-28T04:00:00Z"),
        ("2026-11-28T05:20:00+0100", "2026-11-28T04:00:00Z"),
        ("2026-11-28T05:20:00+01", "2026-11-28T04:00:00Z"),
        ("2026-11-28T09:50:00+05:30", "2026-11-28T04:00:00Z"),
        ("2026-11-27T23:20:00-05:00", "2026-11-28T04:00:00Z"),
        ("2016-12-31T23:59:60Z", "2016-12-31T23:00:00Z"),  # a leap second
    ],
)
def test_every_accepted_iso_form(text: str, released: str) -> None:
    assert start_of(text) == released


def test_parsing_agrees_with_the_stdlib_on_random_times() -> None:
    """Integer arithmetic against ``datetime.fromisoformat``: 3,000 seeded random times over
    the years 1 to 9999, every offset form, fractions of 0 to 9 digits."""
    rng = np.random.default_rng(32)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for _ in range(3_000):
        day = date.fromordinal(int(rng.integers(2, 3_652_058)))
        h, m, sec = (int(v) for v in rng.integers(0, (24, 60, 60)))
        digits = "".join(map(str, rng.integers(0, 10, int(rng.integers(0, 10)))))
        oh, om = int(rng.integers(0, 24)), int(rng.choice([0, 15, 30, 45]))
        sign = str(rng.choice(["+", "-"]))
        offset = str(rng.choice([f"{sign}{oh:02d}:{om:02d}", f"{sign}{oh:02d}{om:02d}", "Z"]))
        text = f"{day.isoformat()}T{h:02d}:{m:02d}:{sec:02d}" + (f".{digits}" if digits else "")
        stdlib = datetime.fromisoformat(
            text[: 20 + min(len(digits), 6)].rstrip(".") + offset.replace("Z", "+00:00")
        )
        assert parse_iso(text + offset, assume_utc=False) == (stdlib - epoch) // timedelta(
            microseconds=1
        ), text + offset


@pytest.mark.parametrize(
    ("text", "released"),
    [
        ("2026-11-28T04:20:00", "2026-11-28T04:00:00Z"),
        ("2026-11-28 04:20", "2026-11-28T04:00:00Z"),
        ("2026-11-28", "2026-11-28T00:00:00Z"),
    ],
)
def test_naive_text_is_utc_only_when_the_config_says_so(text: str, released: str) -> None:
    assert start_of(text, assume_utc=True) == released
    with pytest.raises(Rejected, match=r"no UTC offset.*assume_utc: true") as caught:
        handler().parse(text)
    assert caught.value.reason == "bad_timestamp"
    assert "'ts'" in caught.value.detail and text not in caught.value.detail


@pytest.mark.parametrize(
    "text",
    [
        "yesterday",
        "",
        "2026-02-29T00:00:00Z",  # not a leap year
        "2026-11-31T00:00:00Z",
        "2026-11-28T25:00:00Z",
        "20261128T042000Z",  # basic format: not accepted
        "2026-W48-6",  # week date: not accepted
        "2026-11-28T04:20:00.Z",
        "2026-11-28T04:20:00+5:30",
        "1795819800",  # an epoch number as text
        " 2026-11-28T04:20:00Z",
    ],
)
def test_unparseable_text_is_dead_lettered_naming_the_field_not_the_value(text: str) -> None:
    with pytest.raises(Rejected) as caught:
        handler().parse(text)
    assert caught.value.reason == "bad_timestamp"
    assert "field 'ts'" in caught.value.detail
    assert not text.strip() or text.strip() not in caught.value.detail


@pytest.mark.parametrize("value", [True, None, [1], {"t": 1}])
def test_other_json_types_are_wrong_type(value: object) -> None:
    with pytest.raises(Rejected, match="expected ISO 8601 text or an epoch number") as caught:
        handler().parse(value)
    assert caught.value.reason == "wrong_type"


@pytest.mark.parametrize(
    ("value", "unit", "released"),
    [
        (1_795_839_600, "s", "2026-11-28T04:00:00Z"),
        (1_795_839_600.75, "s", "2026-11-28T04:00:00Z"),
        (1_795_839_600_123, "ms", "2026-11-28T04:00:00Z"),
        (1_795_841_999_999, "ms", "2026-11-28T04:00:00Z"),
        (1_795_842_000_000, "ms", "2026-11-28T05:00:00Z"),
        (0, "s", "1970-01-01T00:00:00Z"),
        (-1, "s", "1969-12-31T23:00:00Z"),  # negative epochs truncate towards the past
        (-0.5, "s", "1969-12-31T23:00:00Z"),
        (-3600, "s", "1969-12-31T23:00:00Z"),
        (-3601, "s", "1969-12-31T22:00:00Z"),
        (-1, "ms", "1969-12-31T23:00:00Z"),
    ],
)
def test_epoch_numbers(value: float, unit: str, released: str) -> None:
    assert start_of(value, epoch_unit=unit) == released  # type: ignore[arg-type]


def test_a_float_just_below_a_boundary_stays_below() -> None:
    """Read as its exact binary fraction: no rounding in a multiplication moves it across."""
    below = math.nextafter(7200.0, 0.0)
    assert start_of(below, granularity="1s") == "1970-01-01T01:59:59Z"  # type: ignore[arg-type]
    assert start_of(7200.0, granularity="1s") == "1970-01-01T02:00:00Z"  # type: ignore[arg-type]


# --- truncation at boundaries ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "granularity", "released"),
    [
        ("2024-02-29T23:59:59.999999Z", "1d", "2024-02-29T00:00:00Z"),  # a leap day
        ("2024-03-01T00:00:00Z", "1d", "2024-03-01T00:00:00Z"),
        ("2024-03-01T00:30:00+01:00", "1d", "2024-02-29T00:00:00Z"),  # the offset crosses
        ("2024-02-28T23:59:59.999999-00:01", "1d", "2024-02-29T00:00:00Z"),
        ("2026-11-28T04:14:59.999999Z", "15m", "2026-11-28T04:00:00Z"),
        ("2026-11-28T04:15:00Z", "15m", "2026-11-28T04:15:00Z"),
        ("2026-11-28T04:20:07Z", "1m", "2026-11-28T04:20:00Z"),
        ("2026-11-28T04:20:07.9Z", "1s", "2026-11-28T04:20:07Z"),
        ("1969-12-31T23:59:59.999999Z", "1d", "1969-12-31T00:00:00Z"),
        ("1900-03-01T12:00:00Z", "1d", "1900-03-01T00:00:00Z"),  # 1900: no leap day
        ("0001-01-01T00:00:00Z", "1d", "0001-01-01T00:00:00Z"),
        ("9999-12-31T23:59:59Z", "1h", "9999-12-31T23:00:00Z"),
    ],
)
def test_truncation_at_boundaries(text: str, granularity: str, released: str) -> None:
    assert start_of(text, granularity=granularity) == released


def test_units_are_aligned_to_the_epoch_and_output_formats_agree() -> None:
    """7d units start on Thursdays (1970-01-01 was one); the epoch outputs give the same start."""
    assert start_of("2026-11-28T04:20:00Z", granularity="7d") == "2026-11-26T00:00:00Z"
    for output, scale in (("epoch_s", 1), ("epoch_ms", 1000)):
        h = handler(output=output)
        (value,) = h.release([h.parse("2026-11-28T04:20:00Z")], SeededSource(0)).values
        assert value == 1_795_838_400 * scale and type(value) is int


# --- value-independent release decision and output shape -----------------------------------

#: raw values in, at and far outside the bounds, of every accepted shape
RAW: list[object] = [
    "2026-01-01T00:00:00Z",
    "2026-01-01T23:59:59.999Z",
    "2026-01-01T12:00:00+14:00",
    "1970-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00-23:59",
    1_767_225_600,
    -(10**30),
    10**400,
    1e308,
    -1.5,
]


def batch(p: RecordPlan, values: list[object], seed: int) -> list[dict[str, Any]]:
    messages = [json.dumps({"ts": v}).encode() for v in values]
    result = process_batch(p, messages, SeededSource(seed))
    assert result.dead_letters == [] and result.output_index == list(range(len(values)))
    return [json.loads(out) for out in result.outputs]


@pytest.mark.parametrize("output", ["iso", "epoch_s", "epoch_ms"])
def test_every_value_is_released_in_the_same_shape(output: str) -> None:
    """In, at or far beyond the bounds, every record is released, as a unit start."""
    p = plan(granularity="1h", bounds=JAN, epsilon=1.0, output=output)
    outputs = batch(p, RAW, seed=1)
    assert {tuple(o) for o in outputs} == {("ts",)}
    values = [o["ts"] for o in outputs]
    if output == "iso":
        assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:00:00Z", v) for v in values)
    else:
        step = H * (1000 if output == "epoch_ms" else 1)
        assert all(type(v) is int and v % step == 0 for v in values)
    h = p.handlers[0]
    assert isinstance(h, TimestampHandler)
    assert all(h.index_of(v) is not None for v in values)


def test_values_outside_the_bounds_are_clamped_and_counted() -> None:
    p = plan(granularity="1h", bounds=JAN)  # public: truncated and clamped, no noise
    values = [o["ts"] for o in batch(p, RAW, seed=2)]
    assert values[:2] == ["2026-01-01T00:00:00Z", "2026-01-01T23:00:00Z"]
    # 12:00+14:00 is 22:00 the day before: clamped to the first unit like the rest
    first, last = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"
    assert values[2:] == [first, first, last, first, first, first, last, last, first]
    h = p.handlers[0]
    column = h.release([h.parse(v) for v in RAW], SeededSource(0))
    assert column.clamped == len(RAW) - 3  # RAW[0], RAW[1] and RAW[6] are inside


def test_the_fast_path_matches_the_reference() -> None:
    p = plan(granularity="1h", bounds=JAN, epsilon=1.0)
    messages = [json.dumps({"ts": v}).encode() for v in [*RAW, "nope", None]]
    fast = process_batch(p, messages, SeededSource(3))
    reference = process_batch_reference(p, messages, SeededSource(3))
    assert fast.outputs == reference.outputs
    assert fast.dead_letters == reference.dead_letters
    assert [d.reason for d in fast.dead_letters] == ["bad_timestamp", "wrong_type"]


# --- the DP inequality of the noised variant ------------------------------------------------


def test_noise_is_calibrated_to_the_bounds_in_whole_units() -> None:
    """The worst pair (the first and the last unit) meets e^eps exactly on every output."""
    h = handler(bounds=JAN, epsilon=0.5)
    mech = h.mechanism
    assert isinstance(mech, IntegerLaplaceMechanism) and mech.noise is not None
    lo, hi = h.parse(JAN[0]), h.parse(JAN[1])
    assert (mech.lower, mech.upper) == (lo, hi) and hi - lo == 24
    outputs = np.arange(lo - 400, hi + 400)
    log_pmf = lambda x: -np.abs(outputs - x) / mech.noise.t  # noqa: E731 -- up to a constant
    assert float(np.max(np.abs(log_pmf(lo) - log_pmf(hi)))) <= 0.5 + 1e-12
    # any raw value beyond the bounds is clamped first: no pair is farther apart
    assert h.parse("2027-06-01T00:00:00Z") == hi + 1
    column = h.release([hi + 1] * 5, SeededSource(0))
    assert column.clamped == 5


@pytest.mark.slow
def test_the_audit_finds_the_noised_field_within_its_epsilon() -> None:
    """The project's audit (Clopper-Pearson, alpha 1e-3 split over field and record: a
    false failure has probability below 1e-3) over the whole path (ISO text in, ISO text
    out) at the worst pair: passes, and its lower bound comes near epsilon (tight: about
    0.9 at 20,000 draws; 0.6 would take a deviation of many standard deviations). The
    public timestamp beside it is filled with a value it parses (the epoch)."""
    public = {"name": "day", "kind": "timestamp", "granularity": "1d"}
    config = parse_config(config_dict([public, NOISED], epsilon=1.0))
    report = audit(config, build_plan(config), samples=20_000, self_check=False)
    (field,) = report.fields
    assert field.name == "ts" and field.passed and report.passed
    assert 0.6 < field.epsilon_lower_bound <= field.claimed_epsilon == 1.0


# --- explain and config -----------------------------------------------------------------------


def test_explain_says_the_public_variant_is_not_private() -> None:
    config = parse_config(
        config_dict([{"name": "ts", "kind": "timestamp", "granularity": "15m"}], epsilon=1.0)
    )
    p = build_plan(config)
    (entry,) = explain_data(config, p)["fields"]
    assert entry["mechanism"] is None and entry["epsilon"] == 0.0
    assert "not private" in entry["public_transform"]
    assert entry["units"] == ["0001-01-01T00:00:00Z", "9999-12-31T23:45:00Z"]  # no bounds
    table = explain(config, p, "table")
    assert "truncated to 15m, as is" in table
    assert "NOT PRIVATE: ts is truncated to 15m and released as is" in table


def test_explain_gives_the_noised_variant_in_units() -> None:
    config = parse_config(config_dict([NOISED], epsilon=1.0))
    (entry,) = explain_data(config, build_plan(config))["fields"]
    assert entry["mechanism"] == "discrete_laplace" and entry["epsilon"] == 1.0
    assert entry["params"]["upper"] - entry["params"]["lower"] == 24
    assert entry["units"] == JAN  # the first and the last unit: 00:00 on both days
    assert entry["metric"].endswith("in units of 1h")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"granularity": "1mo"}, r"granularity: .*not a whole number of s, m, h or d"),
        ({"granularity": "0h"}, "not a whole number"),
        ({"granularity": "1h", "epsilon": 1.0}, "a noised timestamp needs bounds"),
        ({"granularity": "1h", "delta": 1e-6}, "apply to a noised timestamp only"),
        ({"granularity": "1h", "mechanism": "discrete_laplace"}, "apply to a noised"),
        ({"granularity": "1h", "bounds": [JAN[1], JAN[0]]}, "are reversed"),
        ({"granularity": "1h", "bounds": ["2026-01-01", JAN[1]]}, r"bounds\[0\].*UTC offset"),
        ({"granularity": "1h", "bounds": ["soon", JAN[1]]}, r"bounds\[0\] 'soon' is no ISO"),
        ({"granularity": "1h", "output": "rfc2822"}, "output"),
        ({"granularity": "1h", "epoch_unit": "us"}, "epoch_unit"),
    ],
)
def test_config_errors(options: dict[str, Any], message: str) -> None:
    field = {"name": "ts", "kind": "timestamp", **options}
    with pytest.raises(ConfigError, match=message):
        parse_config(config_dict([field], epsilon=1.0))


def test_a_public_timestamp_takes_no_budget() -> None:
    fields = [
        {"name": "ts", "kind": "timestamp", "granularity": "1d"},
        {"name": "n", "kind": "integer", "bounds": [0, 9], "epsilon": "auto"},
    ]
    p = build_plan(parse_config(config_dict(fields, epsilon=2.0)))
    assert p.epsilon == 2.0 and set(p.budget.fields) == {"n"}

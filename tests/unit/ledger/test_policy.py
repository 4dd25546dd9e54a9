"""LedgerPolicy: caps and record cost as exact integers, and the guarantee header."""

from __future__ import annotations

from dataclasses import replace

import pytest
from privstream.config import parse_config
from privstream.errors import MisuseError
from privstream.kinds import build_plan
from privstream.ledger import LedgerPolicy
from privstream.ledger.policy import UNLIMITED

from tests.unit.config.test_ledger_config import ledger_config


def test_the_policy_counts_exact_integer_units() -> None:
    config = parse_config(
        ledger_config({"subject": "device_id", "delta": 1e-6}, delta=1e-6, lifetime_epsilon=200)
    )
    policy = LedgerPolicy.from_config(config, build_plan(config))
    # 0.5 and 4 are exact doubles; 1e-6 is just below 1e-6, so its floor loses one unit
    assert (policy.cost_units, policy.cap_units) == (500_000_000, 4_000_000_000)
    assert policy.delta_cost_units == 0 and policy.delta_cap_units == 999_999_999_999
    assert policy.lifetime_cap_units == 200_000_000_000
    assert policy.records_per_window == 8 and policy.records_per_lifetime == 400
    assert policy.guarantee_header() == b"eps=4;delta=1e-06;window=1d;lifetime_eps=200"


def test_costs_round_up_and_caps_down() -> None:
    data = ledger_config({"subject": "device_id", "epsilon": 0.1}, epsilon=0.3)
    data["fields"][2]["epsilon"] = 0.1
    policy = LedgerPolicy.from_config(parse_config(data))
    # the double 0.1 is 0.1000000000000000055..., the double 0.3 is 0.299999999999999988...
    assert policy.cost_units == 100_000_001 and policy.cap_units == 299_999_999
    assert policy.records_per_window == 2  # three records of 0.1 are more than 0.3


def test_the_record_cost_is_the_exact_sum_of_the_field_shares() -> None:
    data = ledger_config({"subject": "device_id", "epsilon": 1.0}, epsilon=3.0)
    data["fields"][2]["epsilon"] = 0.1
    data["fields"].append({"name": "bpm", "kind": "integer", "bounds": [30, 220], "epsilon": 0.9})
    policy = LedgerPolicy.from_config(parse_config(data))
    # the doubles 0.1 + 0.9 sum to 1 + 2.8e-17 exactly (the rounded double sum is 1.0):
    # three records would be over 3.0
    assert policy.cost_units == 1_000_000_001
    assert policy.records_per_window == 2


def test_the_header_states_the_caps_exactly() -> None:
    data = ledger_config({"subject": "device_id"}, epsilon=1.2345649)
    header = LedgerPolicy.from_config(parse_config(data)).guarantee_header()
    assert header.startswith(b"eps=1.2345649;")


def test_clamped_counts_add_to_the_record_cost() -> None:
    data = ledger_config({"subject": "device_id"}, epsilon=4.0)
    data["metrics"] = {"clamped_counts": {"epsilon": 0.25}}
    config = parse_config(data)
    policy = LedgerPolicy.from_config(config, build_plan(config))
    assert policy.record_epsilon == 0.75 and policy.cost_units == 750_000_000
    assert policy.records_per_window == 5  # 5 * 0.75 = 3.75 <= 4 < 6 * 0.75


def test_pure_records_have_no_delta_limit_and_no_lifetime_means_none() -> None:
    config = parse_config(ledger_config({"subject": "device_id"}, epsilon=1.0))
    policy = LedgerPolicy.from_config(config)
    assert policy.delta_cost_units == 0 and policy.delta_cap_units == 0
    assert policy.records_per_window == 2 and policy.records_per_lifetime is None
    assert policy.guarantee_header() == b"eps=1;delta=0;window=1d"
    assert replace(policy, cost_units=0).records_per_window == UNLIMITED


def test_misuse_is_refused() -> None:
    with pytest.raises(MisuseError, match=r"has no privacy\.ledger"):
        LedgerPolicy.from_config(parse_config(ledger_config({"subject": "device_id"})))
    config = parse_config(ledger_config({"subject": "device_id"}, epsilon=4.0))
    policy = LedgerPolicy.from_config(config)
    with pytest.raises(MisuseError, match="window_ms must be > 0"):
        replace(policy, window_ms=0)
    with pytest.raises(MisuseError, match="non-negative"):
        replace(policy, cap_units=-1)

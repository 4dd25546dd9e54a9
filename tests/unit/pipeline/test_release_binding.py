"""Noise bound to what it releases: the red team's attacks on shared noise recover nothing.

Under noise v1 a record's words were a function of (key, topic, partition,
offset, field position) only, so two releases of one record (a second config,
a re-created topic, reordered fields) shared their uniforms and the raw value
fell out of simple algebra. Each test here plays one of those attacks through
``process_batch`` with the worker's keyed noise, and asserts that it does no
better than it would against independent noise. The broker-level versions are
in ``tests/integration/test_redteam_release.py``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from numpy.typing import NDArray
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.mechanisms.rng import KeyedSource, NoiseKeys, NoiseSource, row_seeds
from privstream.pipeline import process_batch
from privstream.pipeline.noise import Replayable
from privstream.pipeline.plan import RecordPlan

from tests.support.configs import config_dict

SECRET = bytes(range(100, 132))
TOPIC = "raw"
N = 2000
RNG = np.random.default_rng(20261123)
VALUES = RNG.uniform(0.0, 1000.0, N).round(3)
COUNTS = RNG.integers(0, 11, N)
FLAGS = RNG.integers(0, 2, N).astype(bool)


def plan_with(fields: list[dict[str, Any]]) -> RecordPlan:
    return build_plan(parse_config(config_dict(fields, epsilon=50.0, delta=1e-3)))


def fields(eps_x: float = 1.0, eps_n: float = 1.0, eps_b: float = 1.0) -> list[dict[str, Any]]:
    return [
        {"name": "id", "kind": "drop"},
        {
            "name": "x",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": [0, 1000],
            "epsilon": eps_x,
        },
        {"name": "n", "kind": "integer", "bounds": [0, 10], "epsilon": eps_n},
        {"name": "b", "kind": "boolean", "epsilon": eps_b},
    ]


def messages(tag: str = "") -> list[bytes]:
    return [
        json.dumps(
            {"id": f"{tag}{i}", "x": float(VALUES[i]), "n": int(COUNTS[i]), "b": bool(FLAGS[i])}
        ).encode()
        for i in range(N)
    ]


class CoupledV1(Replayable):
    """What noise v1 did, for the control runs: words from coordinates and position only."""

    def for_column(self, release_id: bytes, rows: NDArray[np.int64]) -> NoiseSource:
        empty = [b""] * len(self._offsets)
        seeds = row_seeds(self._keys.row, self._partitions, self._offsets, empty)
        return KeyedSource(self._keys.field(b"position"), seeds[rows])


def release(
    plan: RecordPlan, raw: list[bytes], *, provider: type[Replayable] = Replayable
) -> list[dict[str, Any]]:
    """Every record at partition 0, offsets 0..N-1 (the same coordinates in every call)."""
    offsets = np.arange(len(raw), dtype=np.int64)
    noise = provider(NoiseKeys(SECRET, TOPIC), np.zeros_like(offsets), offsets, raw)
    result = process_batch(plan, raw, noise)
    assert result.output_index == list(range(len(raw)))
    return [json.loads(out) for out in result.outputs]


def column(outs: list[dict[str, Any]], name: str) -> np.ndarray:
    return np.array([out[name] for out in outs])


def test_two_configs_over_one_topic_do_not_cancel_laplace_noise() -> None:
    # v1: x = (b2 y1 - b1 y2) / (b2 - b1) recovered 2,000 of 2,000 values to the grid step.
    # Independent noise: x_hat - x = 2 Z1 - Z2 with Laplace scales 1000 and 2000, whose
    # density is below 1/4000 everywhere, so P(|x_hat - x| <= 1) < 5e-4 per record:
    # about 1 hit expected in 2,000; 12 or more has probability < 1e-9 (Poisson).
    raw = messages()

    def recovered(provider: type[Replayable]) -> int:
        y1 = column(release(plan_with(fields(eps_x=1.0)), raw, provider=provider), "x")
        y2 = column(release(plan_with(fields(eps_x=0.5)), raw, provider=provider), "x")
        b1, b2 = 1000.0, 2000.0
        x_hat = (b2 * y1 - b1 * y2) / (b2 - b1)
        return int(np.sum(np.abs(x_hat - VALUES) <= 1.0))

    assert recovered(Replayable) < 12
    # control: the attack itself works against v1's coupled noise (nearly every value;
    # the two grids differ, so a few land just over 1 unit away)
    assert recovered(CoupledV1) > 0.9 * N


def test_two_configs_do_not_reveal_randomized_response_answers() -> None:
    # v1: one uniform decided keep/flip for both releases, so whenever the answers of
    # epsilon 1 and epsilon 3 differed, the epsilon-3 answer was the truth (100%).
    # Independent: that share is k3 (1 - k1) / (k3 (1 - k1) + (1 - k3) k1) = 0.881 with
    # k = e^eps / (1 + e^eps); over ~580 differing answers its sd is 0.014, so 0.95 is
    # 5 sd above it: false-failure probability < 3e-7. (And it must stay a real signal.)
    raw = messages()

    def share_true(provider: type[Replayable]) -> float:
        low = column(release(plan_with(fields(eps_b=1.0)), raw, provider=provider), "b")
        high = column(release(plan_with(fields(eps_b=3.0)), raw, provider=provider), "b")
        differ = low != high
        return float(np.mean(high[differ] == FLAGS[differ]))

    assert 0.8 < share_true(Replayable) < 0.95
    assert share_true(CoupledV1) == 1.0  # control: v1 named the true value every time


def test_discrete_laplace_of_two_configs_is_not_monotone_in_the_scale() -> None:
    # v1: Z = floor(t E1) - floor(t E2) with the same exponentials: the sign of the
    # noise was shared by both releases. Independent noise agrees in sign (both > 0 or
    # both < 0) with probability ~ 2 * 0.5^2 * (1 - P0)^2 < 0.55; over 2,000 records the
    # share has sd 0.011, so 0.62 is > 6 sd away: false-failure probability < 1e-9.
    raw = messages()
    z1 = column(release(plan_with(fields(eps_n=1.0)), raw), "n") - COUNTS
    z2 = column(release(plan_with(fields(eps_n=0.5)), raw), "n") - COUNTS
    same_sign = np.mean((z1 > 0) & (z2 > 0) | (z1 < 0) & (z2 < 0))
    assert same_sign < 0.62


def test_recreated_topic_gives_other_records_independent_noise() -> None:
    # v1: y_old - y_new == x_old - x_new exactly at every reused offset, and keep/flip
    # decisions matched 100%. A new record at the same coordinates (here: other ids, so
    # other raw bytes) must get fresh noise: equal Laplace noise has probability
    # sum_z p(z)^2 < 1/(4t) ~ 1.3e-4 per record (t ~ 2,000 grid steps): 6 or more of
    # 2,000 has probability < 1e-8. Keep/flip decisions agree with probability
    # k^2 + (1-k)^2 = 0.607 at epsilon 1; 0.68 is 6.7 sd above it.
    plan = plan_with(fields())
    old = release(plan, messages("old-"))
    new = release(plan, messages("new-"))
    same_noise = column(old, "x") - column(new, "x") == 0.0
    assert int(np.sum(same_noise)) < 6
    coupled = [release(plan, messages(tag), provider=CoupledV1) for tag in ("old-", "new-")]
    assert np.all(column(coupled[0], "x") == column(coupled[1], "x"))  # control
    kept_old = column(old, "b") == FLAGS
    kept_new = column(new, "b") == FLAGS
    assert float(np.mean(kept_old == kept_new)) < 0.68


def test_reordering_and_inserting_fields_changes_no_output() -> None:
    # v1 keyed noise by field position: a field moved gets another field's noise.
    # v2 keys it by the field's release (name and parameters), so the record's
    # released values are the same, field for field.
    raw = messages()[:200]
    base = release(plan_with(fields()), raw)
    moved = [*reversed(fields()), {"name": "extra", "kind": "drop"}]
    again = release(plan_with(moved), raw)
    assert again == base


def test_changing_one_field_leaves_the_other_fields_alone() -> None:
    # only the changed field is a second release; the others keep their noise
    raw = messages()[:200]
    base = release(plan_with(fields()), raw)
    changed = release(plan_with(fields(eps_x=2.0)), raw)
    for name in ("n", "b"):
        assert [r[name] for r in changed] == [r[name] for r in base]
    # the changed field gets independent noise: identical output < 1/(4t) per record
    assert sum(c["x"] == b["x"] for c, b in zip(changed, base, strict=True)) < 3


def test_every_release_parameter_enters_the_release_id() -> None:
    base = fields()[1]
    variants = [
        {**base, "epsilon": 0.9},
        {**base, "bounds": [0, 999]},
        {**base, "calibration": "thesis"},
        {**base, "delta": 1e-9},
        {**base, "mechanism": "gaussian", "delta": 1e-6, "calibration": "analytic"},
        {**base, "name": "y"},
    ]
    ids = {plan_with([base]).fields[0].release_id}
    for variant in variants:
        ids.add(plan_with([variant]).fields[0].release_id)
    assert len(ids) == len(variants) + 1

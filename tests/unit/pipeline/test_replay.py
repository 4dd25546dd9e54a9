"""Replay determinism: keyed noise is a function of the record and of its release.

With ``Replayable(NoiseKeys(secret, topic), partitions, offsets, messages)`` a
record's noise depends only on (secret, topic, partition, offset, raw bytes,
field release), so a replay after a crash releases the very same bytes,
however the stream is cut into batches and whichever neighbours fail to
parse. Different coordinates, secrets, topics, raw bytes or field releases
must give independent noise (``test_release_binding`` plays the attacks).
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import numpy as np
import pytest
from privstream.config import parse_config
from privstream.kinds import build_plan
from privstream.mechanisms import OsEntropy
from privstream.mechanisms.rng import NoiseKeys
from privstream.pipeline import process_batch
from privstream.pipeline.noise import Fresh, Replayable
from privstream.pipeline.plan import RecordPlan

from tests.support.configs import config_dict

SECRET = bytes(range(32))
OTHER_SECRET = bytes(range(1, 33))
TOPIC = "raw"

FIELDS: list[dict[str, Any]] = [
    {"name": "device", "kind": "drop"},
    {"name": "ts", "kind": "public"},
    {"name": "salary", "kind": "real", "mechanism": "laplace", "bounds": [0, 5000], "epsilon": 1.0},
    {"name": "count", "kind": "integer", "bounds": [0, 100], "epsilon": 1.0},
    {"name": "state", "kind": "categorical", "domain": ["TX", "CA", "NY"], "epsilon": 1.0},
    {"name": "flag", "kind": "boolean", "epsilon": 0.5},
    {
        "name": "hobbies",
        "kind": "set",
        "universe": ["ski", "chess", "go", "golf"],
        "max_items": 2,
        "epsilon": 1.0,
    },
    {"name": "city", "kind": "categorical", "mechanism": "local_hashing", "epsilon": 2.0},
]
N = 100


@pytest.fixture(scope="module")
def plan() -> RecordPlan:
    return build_plan(parse_config(config_dict(FIELDS, epsilon=6.5)))


def message(i: int) -> bytes:
    """Record i; every 7th and every 11th is bad, so batches hold different good rows."""
    if i % 7 == 3:
        return b'{"broken'
    record: dict[str, Any] = {
        "device": f"dev-{i}",
        "ts": 1_700_000_000 + i,
        "salary": 1000.0 + 37.5 * i,
        "count": i % 60,
        "state": ["TX", "CA", "NY"][i % 3],
        "flag": i % 2 == 0,
        "hobbies": [["ski"], ["go", "golf"], []][i % 3],
        "city": f"city-{i % 5}",
    }
    if i % 11 == 5:
        record["count"] = "not a number"
    return json.dumps(record).encode()


MESSAGES = [message(i) for i in range(N)]
PARTITIONS = np.array([i % 3 for i in range(N)], dtype=np.int64)
OFFSETS = np.array([5_000 + i for i in range(N)], dtype=np.int64)
BAD = {i for i in range(N) if i % 7 == 3 or i % 11 == 5}


def run(
    plan: RecordPlan,
    indices: list[int],
    secret: bytes = SECRET,
    topic: str = TOPIC,
    offsets: np.ndarray = OFFSETS,
    partitions: np.ndarray = PARTITIONS,
) -> dict[int, bytes]:
    """Process the messages at ``indices`` as one batch; map input index -> output bytes."""
    batch = [MESSAGES[i] for i in indices]
    noise = Replayable(NoiseKeys(secret, topic), partitions[indices], offsets[indices], batch)
    result = process_batch(plan, batch, noise)
    assert {indices[d.index] for d in result.dead_letters} == BAD & set(indices)
    return {indices[j]: out for j, out in zip(result.output_index, result.outputs, strict=True)}


def released(outs: dict[int, bytes], field: str) -> dict[int, Any]:
    return {i: json.loads(raw)[field] for i, raw in outs.items()}


def test_same_coordinates_give_identical_bytes(plan: RecordPlan) -> None:
    everything = list(range(N))
    first = run(plan, everything)
    assert set(first) == set(range(N)) - BAD
    assert run(plan, everything) == first


@pytest.mark.parametrize(
    "cuts",
    [
        [50],
        [1, 2, 3, 4, 97],
        [33, 66],
        list(range(10, N, 10)),
        list(range(1, N)),  # one record per batch
    ],
)
def test_batch_splits_do_not_change_outputs(plan: RecordPlan, cuts: list[int]) -> None:
    whole = run(plan, list(range(N)))
    pieces: dict[int, bytes] = {}
    edges = [0, *cuts, N]
    for lo, hi in itertools.pairwise(edges):
        pieces.update(run(plan, list(range(lo, hi))))
    assert pieces == whole


def test_order_within_a_batch_does_not_matter(plan: RecordPlan) -> None:
    whole = run(plan, list(range(N)))
    shuffled = [int(i) for i in np.random.default_rng(1).permutation(N)]
    assert run(plan, shuffled) == whole


def test_outputs_carry_noise(plan: RecordPlan) -> None:
    # the keyed source is not degenerate. salary: b = 5000 / 1 = 5000, grid g = 2^floor(
    # log2(b / 2^10)) = 4, t = 5000 / 4 = 1250 grid steps; an output within g/2 of the input
    # needs Z = 0, probability (1 - a)/(1 + a) ~ 1/(2t) = 4e-4 per record: over 78 records
    # more than 3 such hits has false-failure probability < 1e-7
    outs = run(plan, list(range(N)))
    salary = released(outs, "salary")
    close = sum(abs(salary[i] - (1000.0 + 37.5 * i)) <= 2.0 for i in salary)
    assert close <= 3


def differing_records(a: dict[int, bytes], b: dict[int, bytes]) -> int:
    assert set(a) == set(b)
    return sum(a[i] != b[i] for i in a)


# Two independent releases of one record agree only if every noised field agrees; the
# salary (t ~ 1000 on its grid) and the count (t = 100) alone agree with probability
# below sum_z p(z)^2 ~ 1/(4t) each, so < 1e-6 per record and < 1e-4 over 78 records:
# asserting that every record differs has false-failure probability < 1e-4.


def test_different_offsets_give_different_outputs(plan: RecordPlan) -> None:
    base = run(plan, list(range(N)))
    shifted = run(plan, list(range(N)), offsets=OFFSETS + 1)
    assert differing_records(base, shifted) == len(base)


def test_different_partitions_give_different_outputs(plan: RecordPlan) -> None:
    base = run(plan, list(range(N)))
    moved = run(plan, list(range(N)), partitions=PARTITIONS + 3)
    assert differing_records(base, moved) == len(base)


def test_different_secret_gives_different_outputs(plan: RecordPlan) -> None:
    base = run(plan, list(range(N)))
    other = run(plan, list(range(N)), secret=OTHER_SECRET)
    assert differing_records(base, other) == len(base)


def test_different_topic_gives_different_outputs(plan: RecordPlan) -> None:
    base = run(plan, list(range(N)))
    other = run(plan, list(range(N)), topic="raw-2")
    assert differing_records(base, other) == len(base)


def test_public_fields_are_unaffected_by_the_key(plan: RecordPlan) -> None:
    base = released(run(plan, list(range(N))), "ts")
    other = released(run(plan, list(range(N)), secret=OTHER_SECRET), "ts")
    assert base == other == {i: 1_700_000_000 + i for i in base}


def test_fields_with_identical_config_get_independent_noise() -> None:
    # shared words would release x + Z and x + Z: identical outputs, correlation 1
    spec: dict[str, Any] = {
        "kind": "real",
        "mechanism": "laplace",
        "bounds": [0, 1000],
        "epsilon": 1.0,
    }
    fields: list[dict[str, Any]] = [
        {"name": "a", **spec},
        {"name": "skip", "kind": "drop"},
        {"name": "b", **spec},
    ]
    plan = build_plan(parse_config(config_dict(fields, epsilon=2.0)))
    assert len({f.release_id for f in plan.fields}) == 2
    n = 300
    raw = [b'{"a": 500, "b": 500}'] * n
    noise = Replayable(
        NoiseKeys(SECRET, TOPIC), np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64), raw
    )
    result = process_batch(plan, raw, noise)
    outs = [json.loads(o) for o in result.outputs]
    a = np.array([o["a"] for o in outs]) - 500.0
    b = np.array([o["b"] for o in outs]) - 500.0
    # t ~ 1000 grid steps: P(a_i == b_i) ~ 1/(4t) ~ 2.5e-4, expected 0.075 ties in 300;
    # P(>= 4 ties) < 2e-6
    assert int(np.sum(a == b)) <= 3
    # independent noise: the sample correlation of 300 pairs has sd ~ 0.058;
    # |r| < 0.35 is 6 sd: false-failure probability < 2e-9
    assert abs(float(np.corrcoef(a, b)[0, 1])) < 0.35
    # and each column has the Laplace spread: sd ~ sqrt(2) b, b = 1000 (tight, delta 0);
    # the sample sd of 300 Laplace draws has relative sd ~ sqrt(5/300)/2 ~ 0.065, so
    # rel=0.3 is over 4.5 sd: false-failure probability < 1e-5
    for column in (a, b):
        assert float(np.std(column)) == pytest.approx(math.sqrt(2) * 1000, rel=0.3)


def test_fresh_os_entropy_differs_between_runs(plan: RecordPlan) -> None:
    first = process_batch(plan, MESSAGES, Fresh(OsEntropy()))
    second = process_batch(plan, MESSAGES, Fresh(OsEntropy()))
    assert first.output_index == second.output_index
    assert len(first.outputs) == N - len(BAD)
    # same bound as for keyed sources: every record differs, false failure < 1e-4
    assert sum(x != y for x, y in zip(first.outputs, second.outputs, strict=True)) == len(
        first.outputs
    )


def test_plain_os_entropy_source_also_differs_between_runs(plan: RecordPlan) -> None:
    first = process_batch(plan, MESSAGES, OsEntropy())
    second = process_batch(plan, MESSAGES, OsEntropy())
    assert all(x != y for x, y in zip(first.outputs, second.outputs, strict=True))

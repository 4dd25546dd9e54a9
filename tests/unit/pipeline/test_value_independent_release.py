"""Release that does not depend on the raw value, where the operator asks (issue 13, item 4).

By default a set item outside the universe or a set over ``max_items`` is
dead-lettered, so whether a record is released shows something of its value.
``on_unknown: drop`` and ``on_too_many: truncate`` release such records
instead; categorical fields have ``unknown_as`` for the same purpose.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import numpy as np
import pytest
from privstream.config import parse_config
from privstream.errors import ConfigError
from privstream.kinds import build_plan
from privstream.mechanisms.rng import NoiseKeys, Words
from privstream.mechanisms.unary_encoding import UnaryEncoding
from privstream.pipeline import RecordPlan, process_batch
from privstream.pipeline.noise import Replayable
from privstream.pipeline.reference import process_batch_reference
from privstream.pipeline.structured import SetHandler
from privstream.testing import SeededSource

from tests.support.configs import config_dict

SECRET = bytes(range(60, 92))
UNIVERSE = ["a", "b", "c", "d", "e"]


def tags(**options: Any) -> dict[str, Any]:
    return {
        "name": "tags",
        "kind": "set",
        "universe": UNIVERSE,
        "max_items": 2,
        "epsilon": 1.0,
        **options,
    }


def plan_of(**options: Any) -> RecordPlan:
    fields = [{"name": "seq", "kind": "public"}, tags(**options)]
    return build_plan(parse_config(config_dict(fields, epsilon=1.0)))


def handler_of(plan: RecordPlan) -> SetHandler:
    handler = plan.handlers[1]
    assert isinstance(handler, SetHandler)
    return handler


def keyed(messages: list[bytes], first_offset: int = 0) -> Replayable:
    n = len(messages)
    offsets = np.arange(first_offset, first_offset + n, dtype=np.int64)
    return Replayable(NoiseKeys(SECRET, "raw"), np.zeros(n, dtype=np.int64), offsets, messages)


def record(seq: int, items: list[str]) -> bytes:
    return json.dumps({"seq": seq, "tags": items}).encode()


def test_defaults_dead_letter_as_before() -> None:
    plan = plan_of()
    messages = [record(0, ["a", "zz"]), record(1, ["a", "b", "c"]), record(2, ["a"])]
    result = process_batch(plan, messages, keyed(messages))
    assert [(d.index, d.reason) for d in result.dead_letters] == [
        (0, "unknown_category"),
        (1, "too_many_items"),
    ]
    assert "on_unknown: drop" in result.dead_letters[0].detail
    assert "on_too_many: truncate" in result.dead_letters[1].detail


def test_on_unknown_drop_removes_unknown_items_and_releases() -> None:
    handler = handler_of(plan_of(on_unknown="drop"))
    assert handler.parse(["b", "zz", "a", "b", "?"]) == handler.parse(["a", "b"]) == [0, 1]
    assert handler.parse(["zz"]) == []
    with pytest.raises(Exception, match="items must be strings"):
        handler.parse(["a", 1])  # a wrong type is still a wrong type


def test_truncate_releases_every_well_typed_record_identically_on_both_paths() -> None:
    plan = plan_of(on_too_many="truncate", on_unknown="drop")
    rng = np.random.default_rng(4)
    messages = [
        record(i, [UNIVERSE[j] for j in rng.permutation(5)[: rng.integers(0, 6)]] + ["zz"])
        for i in range(500)
    ]
    fast = process_batch(plan, messages, keyed(messages))
    ref = process_batch_reference(plan, messages, keyed(messages))
    assert fast.dead_letters == ref.dead_letters == []
    assert fast.outputs == ref.outputs
    again = process_batch(plan, messages[250:], keyed(messages[250:], first_offset=250))
    assert again.outputs == fast.outputs[250:]  # a replay picks the same subsets


class Recording:
    """A source that records which words were asked for."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []
        self._inner = SeededSource(3)

    def words(self, n: int, k: int) -> Words:
        self.calls.append(("words", 0, k))
        return self._inner.words(n, k)

    def more_words(self, rows: Any, start: int, k: int) -> Words:
        self.calls.append(("more_words", start, k))
        return self._inner.more_words(rows, start, k)


def test_truncation_reads_words_the_mechanism_does_not() -> None:
    """Unary encoding reads words 0..|U|-1; the subset choice reads |U|.. (independent)."""
    handler = handler_of(plan_of(on_too_many="truncate"))
    source = Recording()
    handler.release([[0, 1, 2, 3], [1], [0, 2, 4]], source)
    assert source.calls == [("more_words", len(UNIVERSE), 4), ("words", 0, len(UNIVERSE))]


def test_truncation_picks_a_uniformly_random_subset() -> None:
    """60,000 sets {a,b,c,d} cut to 2 items: each of the 6 pairs with probability 1/6.

    Bounds: 5 standard deviations per pair (normal approximation, two-sided
    5.7e-7 each, 3.4e-6 for the six).
    """
    handler = handler_of(plan_of(on_too_many="truncate"))
    n = 60_000
    kept = handler._truncated([[0, 1, 2, 3]] * n + [[4]], SeededSource(11))
    assert kept[-1] == [4]  # an admissible set is left alone
    counts = {pair: 0 for pair in itertools.combinations(range(4), 2)}
    for row in kept[:-1]:
        counts[tuple(row)] += 1  # type: ignore[index]
    p = 1 / 6
    sd = math.sqrt(n * p * (1 - p))
    assert sum(counts.values()) == n
    assert all(abs(c - n * p) <= 5 * sd for c in counts.values()), counts


def test_truncation_keeps_the_guarantee_exactly() -> None:
    """The mixture bound of ``SetHandler``, computed exactly on a small universe.

    |U| = 4, max_items = 2: the output law of a set S is the average of unary
    encoding's law over the 2-subsets T of S (S itself when admissible). For
    every output A and every pair of inputs (all subsets of U), the ratio
    must stay within e^eps.
    """
    eps = 1.0
    ue = UnaryEncoding(universe=["a", "b", "c", "d"], max_items=2, epsilon=eps)
    p, q = ue.p, ue.q
    outputs = list(itertools.product((0, 1), repeat=4))

    def law(t: tuple[int, ...]) -> np.ndarray:
        return np.array(
            [
                math.prod(
                    (p if j in t else q) if a[j] else (1 - p if j in t else 1 - q) for j in range(4)
                )
                for a in outputs
            ]
        )

    inputs = [s for r in range(5) for s in itertools.combinations(range(4), r)]
    laws = [
        np.mean([law(t) for t in itertools.combinations(s, 2)], axis=0) if len(s) > 2 else law(s)
        for s in inputs
    ]
    worst = max(float(np.max(x / y)) for x in laws for y in laws)
    admissible = [x for s, x in zip(inputs, laws, strict=True) if len(s) <= 2]
    tight = max(float(np.max(x / y)) for x in admissible for y in admissible)
    assert worst <= math.exp(eps) * (1 + 1e-9)
    assert tight >= math.exp(eps) * (1 - 1e-9)  # the bound binds: the check is not vacuous


def test_truncate_needs_room_in_the_noise_stream() -> None:
    big = [f"i{j}" for j in range(2**16 + 1)]
    fields = [{**tags(on_too_many="truncate"), "universe": big}]
    with pytest.raises(ConfigError) as info:
        parse_config(config_dict(fields, epsilon=1.0))
    assert "at most 65536 items" in info.value.problems[0]

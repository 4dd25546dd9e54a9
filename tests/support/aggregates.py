"""Configs with ``aggregates:`` and the exact discrete Laplace pmf, for the aggregates' tests.

The pmf is written from DESIGN.md / the discrete Laplace proof page
(``P(Z = z) = (1 - a)/(1 + a) a^|z|``, ``a = e^(-1/t)``), independently of
the code under test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from privstream.aggregates import AggregatePlan, build_aggregates
from privstream.config import AppConfig, parse_config
from privstream.mechanisms.rng import NoiseSource
from privstream.testing import SeededSource

FIELDS: list[dict[str, Any]] = [
    {"name": "user", "kind": "drop"},
    {"name": "home", "kind": "drop"},
    {"name": "version", "kind": "public"},
    {"name": "os", "kind": "categorical", "domain": ["ios", "android", "web"], "epsilon": 0.5},
    {"name": "latency", "kind": "real", "bounds": [0, 100], "epsilon": 0.5},
]


def aggregates_config(*aggregates: dict[str, Any], **privacy: Any) -> AppConfig:
    """A config over ``FIELDS`` with these aggregates; ``privacy`` overrides (epsilon 10,
    delta 1e-4)."""
    return parse_config(
        {
            "kafka": {"input_topic": "raw", "output_topic": "out", "dead_letter_topic": "dlq"},
            "privacy": {"epsilon": 10.0, "delta": 1e-4, **privacy},
            "fields": FIELDS,
            "aggregates": list(aggregates),
        }
    )


def one_plan(aggregate: dict[str, Any], **privacy: Any) -> AggregatePlan:
    """The plan of a config holding this one aggregate."""
    (plan,) = build_aggregates(aggregates_config(aggregate, **privacy))
    return plan


class Seeded:
    """A ``CellNoise`` of reproducible PCG64 words (tests only)."""

    def __init__(self, seed: int) -> None:
        self._source = SeededSource(seed)

    def source(
        self, release_id: bytes, window: str, data: bytes, cells: Sequence[bytes]
    ) -> NoiseSource:
        return self._source


def pmf(t: float, z: int) -> float:
    """The ideal discrete Laplace of parameter ``t`` at ``z``."""
    a = math.exp(-1.0 / t)
    return (1.0 - a) / (1.0 + a) * a ** abs(z)

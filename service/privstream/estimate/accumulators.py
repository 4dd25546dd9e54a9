"""Per-field accumulators: what ``privstream estimate`` keeps while it reads.

Each released field gets one accumulator that validates the sanitized value
of every record, keeps the statistics its estimator needs (counts, moments,
observation histograms, OLH reports) and turns them into a report entry with
the estimator functions of ``privstream.mechanisms`` (the math lives there).
A value that is missing or malformed is skipped for that field and counted;
it never stops the read.

Beside each, a *truth* accumulator reads the raw records (``--truth``) the
way the sanitizer parses them and keeps the same population quantities, so
the report can set each estimate beside its true value.

This module holds what every accumulator shares (``Options``, the
``Accumulator`` and ``Truth`` protocols, ``BaseAccumulator``); the accumulators
are in ``frequency`` (categories, hashed categories, sets) and ``numeric``
(reals, integers, vectors, functions), and ``aggregate.accumulator_for`` picks
one per field.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Protocol

from privstream.mechanisms import Mechanism

#: stands for a field the record does not have
MISSING: Any = object()


@dataclass(frozen=True)
class Options:
    """What the report is asked for."""

    bins: int = 10
    confidence: float = 0.95
    #: per field: the candidate values (local hashing and set fields)
    candidates: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: bootstrap resamples of the histogram deconvolution
    resamples: int = 200
    #: without candidates, a hashed field takes the truth's most frequent values
    truth_candidates: int = 20
    #: add Norm-Sub consistent frequencies beside the unbiased ones (categorical fields)
    consistent: bool = False

    @property
    def z(self) -> float:
        """The two-sided normal quantile of ``confidence``."""
        return NormalDist().inv_cdf(0.5 + self.confidence / 2.0)


def interval(estimate: float, stderr: float, z: float) -> list[float | None]:
    """The interval ``estimate -/+ z stderr``; ``[None, None]`` when ``stderr`` is not finite."""
    if not math.isfinite(stderr):
        return [None, None]
    return [estimate - z * stderr, estimate + z * stderr]


class Truth(Protocol):
    """Population quantities of the raw records, for one field."""

    def add(self, parsed: Sequence[Any], raw: Sequence[Any]) -> None: ...


class Accumulator(Protocol):
    """What the reader feeds and the report reads, for one field."""

    name: str
    kind: str
    mechanism: Mechanism
    records: int
    skipped: Counter[str]
    notes: list[str]
    #: nulls are released values of the field (``on_missing: null``), skipped as ``null``
    nullable: bool

    def add(self, values: Sequence[Any]) -> None: ...

    def new_truth(self) -> Truth: ...

    def report(self, options: Options, truth: Truth | None) -> dict[str, Any]: ...


class BaseAccumulator:
    """Name, mechanism, counts of records and skipped values, notes: the report header."""

    def __init__(self, name: str, kind: str, mechanism: Mechanism) -> None:
        self.name = name
        self.kind = kind
        self.mechanism = mechanism
        self.records = 0
        self.skipped: Counter[str] = Counter()
        self.notes: list[str] = []
        self.nullable = False

    def _header(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "mechanism": self.mechanism.name,
            "epsilon": self.mechanism.epsilon,
            "delta": self.mechanism.delta,
            "records": self.records,
            "skipped": dict(sorted(self.skipped.items())),
            "notes": list(self.notes),
        }

    def _skip(self, value: object) -> None:
        if value is MISSING:
            self.skipped["missing"] += 1
        else:
            self.skipped["null" if value is None and self.nullable else "invalid"] += 1

r"""Test sets: measurable sets of a field's outputs, and the families the audit checks.

Theorem 4.1 of the thesis (DESIGN.md §1): if the DP inequality holds on an
algebra ``S`` that generates the output sigma-algebra, it holds on every
measurable set. So an audit may draw its test sets from such an algebra
without missing anything in the limit; with finitely many sets it is a
lower bound. The families, per kind of output:

* **Reals and integers**: half-lines ``{y <= t}`` and ``{y > t}``. They
  generate the Borel sets (their finite disjoint unions, the intervals, form
  the generating algebra of Theorem 4.1). For a shift family with a monotone
  likelihood ratio (Laplace, Gaussian and their discrete versions on the
  grid) the set where the likelihood ratio exceeds ``e^eps``, which is where
  the hockey-stick divergence and hence the worst ``(p - delta)/q`` is
  attained (Neyman-Pearson), is a half-line, so intervals would add nothing
  for the library's mechanisms and would multiply the Bonferroni correction.
  Thresholds ``t`` are quantiles of the pooled outputs of a separate *pilot*
  sample (levels 1/25 .. 24/25 plus the tails 1e-3, 3e-3, 1e-2, 3e-2 and
  their mirrors). Choosing them from the counted sample itself would bias
  the Clopper-Pearson intervals (the thresholds would depend on the counts);
  a fixed grid from the bounds and the noise scale would work too but needs
  per-mechanism knowledge, while quantiles adapt to any output law.
* **Vectors and functions**: half-spaces ``{<y, u> <= t}`` and ``{> t}`` along
  the direction ``u`` of ``x - x'`` (for spherical Gaussian noise the
  projection on ``x - x'`` is the likelihood ratio's sufficient statistic)
  and, for functional fields whose noise has covariance ``sigma^2 A``, also
  along ``A^-1 (x - x')`` (the sufficient statistic there). Thresholds as for
  reals, from the pilot's projections. Half-spaces generate the Borel sets
  of ``R^k`` (Cramer-Wold).
* **Finite outputs** (categorical, boolean): every singleton ``{v}`` and its
  complement (domains up to 16 values; beyond, those of the audited values).
  The algebra of a finite domain is all subsets; randomized response's worst
  set is a singleton (``privstream.mechanisms.randomized_response``).
* **Sets** (unary encoding): per item of ``A u B`` the indicator events
  ``{j in Y}`` and ``{j not in Y}``; ``Y`` restricted to ``A u B`` equal to
  ``A`` (or ``B``), the extremal event of the whole-set guarantee
  (``privstream.mechanisms.unary_encoding``), and its complement; "exactly the
  set" ``{Y = A}``, ``{Y = B}``.
* **Local hashing** ``(s, y)``: "the report supports ``v``",
  ``{y = H_s(v)}``, and the extremal ``{y = H_s(v) != H_s(v')}``, for ``v``
  and ``v'``, with complements.

Events are small objects with a ``label`` (shown in the report as the worst
set) and a ``mask`` over a sample of outputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from privstream.mechanisms.local_hashing import hash_to_bucket

BoolArray = NDArray[np.bool_]

#: pilot quantile levels for thresholds: an even spread plus both tails
QUANTILE_LEVELS: tuple[float, ...] = tuple(
    sorted(
        {round(i / 25.0, 6) for i in range(1, 25)}
        | {1e-3, 3e-3, 1e-2, 3e-2}
        | {1.0 - v for v in (1e-3, 3e-3, 1e-2, 3e-2)}
    )
)
#: finite domains up to this size get a singleton (and complement) for every value
FINITE_ALL_VALUES = 16


@dataclass
class Sample:
    """The outputs of one input's draws: one column per examined field, plus cached statistics."""

    columns: Mapping[str, NDArray[Any]]
    _cache: dict[Statistic, NDArray[np.float64]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(next(iter(self.columns.values())))

    def statistic(self, stat: Statistic) -> NDArray[np.float64]:
        if stat not in self._cache:
            self._cache[stat] = stat.values(self.columns[stat.field])
        return self._cache[stat]


@dataclass(frozen=True)
class Statistic:
    """A real function of one field's output column: the value, or one of its columns.

    Vector and functional fields are stored as their projections ``<y, u>``
    (one column per direction, computed batch by batch while sampling, so a
    wide vector never has to be held whole); ``component`` picks one.
    """

    field: str
    label: str
    component: int | None = None

    def values(self, column: NDArray[Any]) -> NDArray[np.float64]:
        data = np.asarray(column, dtype=np.float64)
        if self.component is None:
            return data
        picked: NDArray[np.float64] = data[:, self.component]
        return picked


class Event(Protocol):
    """A test set: a measurable set of outputs."""

    @property
    def label(self) -> str: ...

    def mask(self, sample: Sample) -> BoolArray:
        """Which draws of ``sample`` lie in the set."""
        ...


@dataclass(frozen=True)
class HalfLine:
    """``{s(y) <= t}`` or, with ``above``, its complement ``{s(y) > t}``."""

    stat: Statistic
    threshold: float
    above: bool

    @property
    def label(self) -> str:
        return f"{self.stat.label} {'>' if self.above else '<='} {self.threshold:.6g}"

    def mask(self, sample: Sample) -> BoolArray:
        values = sample.statistic(self.stat)
        inside: BoolArray = values > self.threshold if self.above else values <= self.threshold
        return inside


@dataclass(frozen=True)
class InSet:
    """``{y in members}`` for a finite-valued output coded as integers."""

    field: str
    members: frozenset[int]
    text: str

    @property
    def label(self) -> str:
        return self.text

    def mask(self, sample: Sample) -> BoolArray:
        column = np.asarray(sample.columns[self.field])
        inside: BoolArray = np.isin(column, np.fromiter(self.members, dtype=np.int64))
        return inside


@dataclass(frozen=True)
class BitPattern:
    """Set outputs as bit columns: ``{y_j = pattern_j for j in positions}``, or its complement."""

    field: str
    positions: tuple[int, ...]
    pattern: tuple[bool, ...]
    negate: bool
    text: str

    @property
    def label(self) -> str:
        return self.text

    def mask(self, sample: Sample) -> BoolArray:
        bits = np.asarray(sample.columns[self.field], dtype=np.bool_)
        want = np.asarray(self.pattern, dtype=np.bool_)
        match: BoolArray = np.all(bits[:, list(self.positions)] == want[None, :], axis=1)
        return ~match if self.negate else match


@dataclass(frozen=True)
class Supports:
    """Local hashing ``(s, y)``: ``{y = H_s(v)}``, optionally ``and H_s(v) != H_s(v')``."""

    field: str
    digest: int
    other: int | None
    buckets: int
    negate: bool
    text: str

    @property
    def label(self) -> str:
        return self.text

    def mask(self, sample: Sample) -> BoolArray:
        reports = np.asarray(sample.columns[self.field], dtype=np.uint64)
        seeds, reported = reports[:, 0], reports[:, 1]
        target = hash_to_bucket(seeds, np.array([self.digest], dtype=np.uint64), self.buckets)
        match: BoolArray = reported == target
        if self.other is not None:
            others = np.array([self.other], dtype=np.uint64)
            match &= hash_to_bucket(seeds, others, self.buckets) != target
        return ~match if self.negate else match


@dataclass(frozen=True)
class AllOf:
    """The intersection of events (of different fields of one record)."""

    parts: tuple[Event, ...]

    @property
    def label(self) -> str:
        return " and ".join(f"({part.label})" for part in self.parts)

    def mask(self, sample: Sample) -> BoolArray:
        inside = np.ones(sample.size, dtype=np.bool_)
        for part in self.parts:
            inside &= part.mask(sample)
        return inside


# --- families --------------------------------------------------------------------------


def pilot_thresholds(values: Iterable[NDArray[np.float64]]) -> NDArray[np.float64]:
    """Distinct quantiles (``QUANTILE_LEVELS``) of the pooled pilot values: sample points."""
    pooled = np.concatenate([np.asarray(v, dtype=np.float64) for v in values])
    if len(pooled) == 0:
        return np.zeros(0)
    quantiles = np.quantile(pooled, QUANTILE_LEVELS, method="inverted_cdf")
    thresholds: NDArray[np.float64] = np.unique(quantiles)
    return thresholds


def half_lines(stat: Statistic, pilot: Sequence[Sample]) -> list[Event]:
    """``{s <= t}`` and ``{s > t}`` for thresholds from the pilot samples."""
    thresholds = pilot_thresholds(sample.statistic(stat) for sample in pilot)
    events: list[Event] = []
    for t in thresholds.tolist():
        events.append(HalfLine(stat, float(t), above=False))
        events.append(HalfLine(stat, float(t), above=True))
    return events


def singletons_and_complements(
    field: str, codes: Sequence[int], size: int, names: Sequence[str]
) -> list[Event]:
    """``{v}`` and ``D \\ {v}`` for each code (deduplicated: for |D| = 2 they coincide)."""
    seen: set[frozenset[int]] = set()
    events: list[Event] = []
    everything = frozenset(range(size))
    candidates = [(frozenset({c}), f"{field} = {names[c]}") for c in codes]
    candidates += [(everything - {c}, f"{field} != {names[c]}") for c in codes]
    for members, text in candidates:
        if members not in seen and 0 < len(members) < size:
            seen.add(members)
            events.append(InSet(field, members, text))
    return events

r"""What to audit for each field: worst-case neighbouring inputs and the test-set family.

A field's guarantee is about its release as a function of the raw record:
for *any* two raw values ``x, x'`` of the field, ``P[Y(x) in S] <=
e^eps P[Y(x') in S] + delta``. The audit picks the inputs where the claim is
hardest to keep (the mechanisms' own derivations say where the worst case
is):

* ``real``: the bounds ``lo`` and ``hi`` (clamping makes them the farthest
  apart; the sensitivity on the grid is attained there). Piecewise,
  PM-SUB, hybrid and duchi too: their windows (and Duchi's coin) are farthest
  apart there, and every cell's probability ratio is bounded by the same ``p_max /
  p_min`` for every input (``privstream.mechanisms.piecewise``).
* ``integer``: ``lo`` and ``hi``.
* ``boolean``: ``false`` and ``true``.
* ``categorical`` (randomized response): every pair of domain values, for
  domains up to 8 values; beyond, 8 values spread over the domain (all pairs
  of them). Randomized response is symmetric, so any pair is a worst case;
  testing all of them is what would catch an implementation that is not.
* ``categorical`` (local hashing): two distinct strings (the hash is keyed
  by a fresh seed per record, so every pair of values is alike).
* ``set``: two sets differing in the most items, ``A`` = the first
  ``a = min(k, d)`` items and ``B`` = the next ``min(k, d - a)`` (disjoint;
  ``unary_encoding.worst_case_differences``).
* ``vector``: ``R e_1`` and ``-R e_1``, opposite points of the L2 ball (the
  sensitivity ``2R``).
* ``functional``: the flat curve ``v = c 1`` scaled to RKHS norm ``R``
  (``||L^-1 v||_2 = R``) and ``-v``, opposite points of the RKHS ball.

Memoized fields (``memoize_by``) are handled by the sampler
(``privstream.audit.sampling``): each draw carries a distinct memo value.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from privstream.audit.events import (
    FINITE_ALL_VALUES,
    BitPattern,
    Event,
    Sample,
    Statistic,
    Supports,
    half_lines,
    singletons_and_complements,
)
from privstream.mechanisms import Mechanism
from privstream.mechanisms.base import FiniteMechanism
from privstream.mechanisms.functional import FunctionalMechanism
from privstream.mechanisms.local_hashing import OptimalLocalHashing, value_digests
from privstream.mechanisms.unary_encoding import UnaryEncoding, worst_case_differences
from privstream.mechanisms.vector_gaussian import VectorGaussianMechanism

#: randomized response: audit every pair of at most this many domain values
MAX_CATEGORIES = 8
#: the two strings local hashing is audited on
OLH_VALUES = ("privstream-audit-a", "privstream-audit-b")


def _short(value: Any) -> str:
    """A config value (never a raw record value) as shown in the report."""
    if isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, str):
        text = repr(value)
    elif isinstance(value, float):
        text = f"{value:g}"
    else:
        text = str(value)
    return text if len(text) <= 24 else text[:21] + "..."


def mechanism_label(mech: Mechanism) -> str:
    """``laplace (tight)``, ``unary_encoding (optimized)``, ...: name and variant."""
    params = mech.params()
    extra = params.get("calibration", params.get("variant"))
    return f"{mech.name} ({extra})" if extra is not None else mech.name


class Target(ABC):
    """One noised field of a plan, seen by the audit."""

    def __init__(self, name: str, mechanism: Mechanism) -> None:
        self.name = name
        self.mechanism = mechanism
        self.epsilon = mechanism.epsilon
        self.delta = mechanism.delta

    @property
    def label(self) -> str:
        return mechanism_label(self.mechanism)

    @property
    @abstractmethod
    def inputs(self) -> tuple[Any, ...]:
        """Raw JSON values of the field; every pair of them is audited."""

    def input_label(self, index: int) -> str:
        return f"{self.name}={_short(self.inputs[index])}"

    #: whether the family's thresholds come from a pilot sample
    needs_pilot: bool = False

    @abstractmethod
    def convert(self, values: list[Any]) -> NDArray[Any]:
        """Parsed JSON outputs of the field -> the column the events read."""

    @abstractmethod
    def events(self, pilot: Sequence[Sample] | None, audited: Sequence[int]) -> list[Event]:
        """The test sets for the inputs ``audited`` (pilot samples of those inputs, in order)."""


class RealTarget(Target):
    """``real`` (Laplace, Gaussian and the local mechanisms): ``lo`` vs ``hi``, half-lines."""

    needs_pilot = True

    def __init__(self, name: str, mechanism: Mechanism, bounds: tuple[float, float]) -> None:
        super().__init__(name, mechanism)
        self.bounds = bounds

    @property
    def inputs(self) -> tuple[Any, ...]:
        return self.bounds

    def convert(self, values: list[Any]) -> NDArray[Any]:
        return np.asarray(values, dtype=np.float64)

    def events(self, pilot: Sequence[Sample] | None, audited: Sequence[int]) -> list[Event]:
        assert pilot is not None  # noqa: S101 -- needs_pilot
        return half_lines(Statistic(self.name, self.name), pilot)


class IntegerTarget(RealTarget):
    """``integer`` (discrete Laplace): ``lo`` vs ``hi``, half-lines at integers."""


class FiniteTarget(Target):
    """A finite domain (randomized response, ordinal exponential): singletons and complements."""

    def __init__(self, name: str, mechanism: FiniteMechanism, audited: tuple[int, ...]) -> None:
        super().__init__(name, mechanism)
        self.domain = mechanism.domain
        self.codes = audited
        self._index = {(type(v), v): i for i, v in enumerate(self.domain)}

    @property
    def inputs(self) -> tuple[Any, ...]:
        return tuple(self.domain[i] for i in self.codes)

    def convert(self, values: list[Any]) -> NDArray[Any]:
        index = self._index
        return np.fromiter((index[(type(v), v)] for v in values), dtype=np.int64, count=len(values))

    def events(self, pilot: Sequence[Sample] | None, audited: Sequence[int]) -> list[Event]:
        size = len(self.domain)
        codes = range(size) if size <= FINITE_ALL_VALUES else [self.codes[i] for i in audited]
        names = [_short(v) for v in self.domain]
        return singletons_and_complements(self.name, list(codes), size, names)


def spread_codes(size: int, most: int = MAX_CATEGORIES) -> tuple[int, ...]:
    """All of ``0..size-1`` when ``size <= most``, else ``most`` evenly spread indices."""
    if size <= most:
        return tuple(range(size))
    return tuple(sorted({round(i * (size - 1) / (most - 1)) for i in range(most)}))


class HashedTarget(Target):
    """``categorical`` with local hashing: two strings, "supports v" events."""

    def __init__(
        self, name: str, mechanism: OptimalLocalHashing, domain: tuple[str, ...] | None = None
    ) -> None:
        super().__init__(name, mechanism)
        self.buckets = mechanism.buckets
        # a field with a domain (``mechanism: auto``) takes only its values: audit two of them
        self.values = OLH_VALUES if domain is None else domain[:2]
        self.digests = [int(d) for d in value_digests(self.values)]

    @property
    def inputs(self) -> tuple[Any, ...]:
        return self.values

    def convert(self, values: list[Any]) -> NDArray[Any]:
        rows = [(v["seed"], v["bucket"]) for v in values]
        return np.array(rows, dtype=np.uint64).reshape(len(rows), 2)

    def events(self, pilot: Sequence[Sample] | None, audited: Sequence[int]) -> list[Event]:
        events: list[Event] = []
        for i in audited:
            j = next(k for k in audited if k != i)
            mine, other = self.digests[i], self.digests[j]
            value = _short(self.values[i])
            for negate in (False, True):
                no = "not " if negate else ""
                events.append(
                    Supports(self.name, mine, None, self.buckets, negate, f"{no}supports {value}")
                )
                events.append(
                    Supports(
                        self.name,
                        mine,
                        other,
                        self.buckets,
                        negate,
                        f"{no}supports {value} only",
                    )
                )
        return events


class SetTarget(Target):
    """``set`` (unary encoding): two sets differing in the most items.

    The column keeps one bit per item of ``A u B`` and a last bit "some
    other item was reported" (items outside ``A u B`` have the same law
    under both inputs), so a large universe costs no memory.
    """

    def __init__(self, name: str, mechanism: UnaryEncoding) -> None:
        super().__init__(name, mechanism)
        self.universe = mechanism.universe
        a, b = worst_case_differences(len(self.universe), mechanism.max_items)
        self.first = tuple(range(a))
        self.second = tuple(range(a, a + b))
        self.touched = self.first + self.second
        self._column = {self.universe[j]: c for c, j in enumerate(self.touched)}

    @property
    def inputs(self) -> tuple[Any, ...]:
        return (
            [self.universe[j] for j in self.first],
            [self.universe[j] for j in self.second],
        )

    def input_label(self, index: int) -> str:
        items = self.inputs[index]
        shown = ",".join(items[:3]) + (",..." if len(items) > 3 else "")
        return f"{self.name}={{{shown}}}"

    def convert(self, values: list[Any]) -> NDArray[Any]:
        other = len(self.touched)
        bits = np.zeros((len(values), other + 1), dtype=np.bool_)
        column = self._column
        for row, items in enumerate(values):
            bits[row, [column.get(item, other) for item in items]] = True
        return bits

    def events(self, pilot: Sequence[Sample] | None, audited: Sequence[int]) -> list[Event]:
        touched = tuple(range(len(self.touched)))
        events: list[Event] = []
        for c, j in enumerate(self.touched):
            item = _short(self.universe[j])
            events.append(BitPattern(self.name, (c,), (True,), False, f"{item} in {self.name}"))
            events.append(
                BitPattern(self.name, (c,), (False,), False, f"{item} not in {self.name}")
            )
        rest = len(self.universe) > len(self.touched)
        for which, members in (("A", set(self.first)), ("B", set(self.second))):
            pattern = tuple(j in members for j in self.touched)
            text = f"{self.name} on A u B = {which}"
            events.append(BitPattern(self.name, touched, pattern, False, text))
            events.append(BitPattern(self.name, touched, pattern, True, f"not ({text})"))
            if rest:  # nothing outside A u B either
                everything = (*touched, len(touched))
                events.append(
                    BitPattern(
                        self.name, everything, (*pattern, False), False, f"{self.name} = {which}"
                    )
                )
        return events


class ProjectionTarget(Target):
    """``vector`` / ``functional``: opposite points, half-spaces along chosen directions.

    The column holds the projections ``<y, u>`` on the unit directions, one
    per column (``Statistic.component``).
    """

    needs_pilot = True

    def __init__(
        self,
        name: str,
        mechanism: Mechanism,
        point: NDArray[np.float64],
        directions: Sequence[tuple[str, NDArray[np.float64]]],
        point_label: str,
    ) -> None:
        super().__init__(name, mechanism)
        self.point = [float(v) for v in point]
        self.point_label = point_label
        units = [d / float(np.linalg.norm(d)) for _, d in directions]
        self.directions: NDArray[np.float64] = np.stack(units, axis=1)  # (k, statistics)
        self.statistics = [
            Statistic(name, text, component=c) for c, (text, _) in enumerate(directions)
        ]

    @property
    def inputs(self) -> tuple[Any, ...]:
        return (self.point, [-v for v in self.point])

    def input_label(self, index: int) -> str:
        return f"{self.name}={'+' if index == 0 else '-'}{self.point_label}"

    def convert(self, values: list[Any]) -> NDArray[Any]:
        matrix = np.asarray(values, dtype=np.float64).reshape(len(values), len(self.point))
        projected: NDArray[np.float64] = matrix @ self.directions
        return projected

    def events(self, pilot: Sequence[Sample] | None, audited: Sequence[int]) -> list[Event]:
        assert pilot is not None  # noqa: S101 -- needs_pilot
        events: list[Event] = []
        for stat in self.statistics:
            events.extend(half_lines(stat, pilot))
        return events


def vector_target(name: str, mech: VectorGaussianMechanism) -> ProjectionTarget:
    point = np.zeros(mech.dimension)
    point[0] = mech.l2_bound
    unit = np.zeros(mech.dimension)
    unit[0] = 1.0
    return ProjectionTarget(
        name, mech, point, [(f"{name}[0]", unit)], f"R e1 (R={mech.l2_bound:g})"
    )


def functional_target(name: str, mech: FunctionalMechanism) -> ProjectionTarget:
    k = mech.dimension
    ones = np.ones((1, k))
    point = ones[0] * mech.rkhs_radius / float(mech.rkhs_norm(ones)[0])
    covariance = mech.cholesky @ mech.cholesky.T  # A = M + lambda I
    whitened = np.linalg.solve(covariance, 2.0 * point)  # A^-1 (x - x')
    directions: list[tuple[str, NDArray[np.float64]]] = [(f"mean of {name}", ones[0])]
    unit_w = whitened / float(np.linalg.norm(whitened))
    if abs(abs(float(unit_w @ ones[0])) / math.sqrt(k) - 1.0) > 1e-9:  # not parallel
        directions.append((f"<{name}, A^-1 u>", whitened))
    return ProjectionTarget(
        name, mech, point, directions, f"flat curve {point[0]:.4g} (RKHS norm R)"
    )

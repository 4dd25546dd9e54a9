"""Handlers for structured field kinds: vectors, functions, sets, hashed strings.

Same contract as ``privstream.pipeline.handlers``: ``parse`` validates one JSON
value without quoting it in errors, ``release`` runs the mechanism over the
whole column of a batch at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privstream.mechanisms import Mechanism, NoiseSource
from privstream.pipeline.handlers import (
    CategoricalHandler,
    Column,
    Rejected,
    clamped_number,
    json_type,
)


@dataclass(frozen=True)
class VectorHandler:
    """A JSON array of exactly ``dimension`` numbers (vectors and sampled functions).

    An element beyond the double range (``1e999``) is the largest double of its
    sign (``clamped_number``), so the norm clip maps the record onto the ball
    like any other long vector instead of dead-lettering it on its value.
    """

    name: str
    mechanism: Mechanism
    dimension: int

    def parse(self, value: object) -> list[float]:
        if not isinstance(value, list):
            raise Rejected(
                "wrong_type", f"field {self.name!r}: expected an array, got {json_type(value)}"
            )
        if len(value) != self.dimension:
            raise Rejected(
                "wrong_shape",
                f"field {self.name!r}: expected {self.dimension} numbers, got {len(value)}",
            )
        return [clamped_number(self.name, item) for item in value]

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        matrix = np.asarray(values, dtype=np.float64).reshape(len(values), self.dimension)
        released = self.mechanism.release(matrix, source)
        # one float64 row per record (not Python floats): ``float_rows_texts`` writes them
        return Column(list(released), self.mechanism.noise_error(matrix, released))


@dataclass(frozen=True)
class SetHandler:
    """A JSON array of distinct-or-repeated universe items, at most ``max_items`` distinct.

    ``drop_unknown``: items outside the universe are removed instead of
    dead-lettering the record (a function of the record alone).
    ``truncate``: a set over ``max_items`` keeps a uniformly random subset of
    ``max_items`` of its items instead of being dead-lettered. The choice is
    randomized preprocessing, then unary encoding of an admissible set: for
    every output set ``A`` and inputs ``S, S'``, ``P(A | S) = E_T[P(A | T)]
    <= e^eps min_T' P(A | T') <= e^eps P(A | S')`` (``T, T'`` admissible),
    so the guarantee is unchanged. It draws words ``|U| .. |U| + m - 1`` of
    the row's stream (``m`` the row's distinct items; the mechanism reads
    words ``0 .. |U| - 1``), so a replay chooses the same subset and the
    choice is independent of the mechanism's noise.
    """

    name: str
    mechanism: Mechanism
    universe: tuple[str, ...]
    max_items: int
    drop_unknown: bool = False
    truncate: bool = False
    _position: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_position", {v: i for i, v in enumerate(self.universe)})

    def parse(self, value: object) -> list[int]:
        if not isinstance(value, list):
            raise Rejected(
                "wrong_type", f"field {self.name!r}: expected an array, got {json_type(value)}"
            )
        positions = set()
        for item in value:
            if not isinstance(item, str):
                raise Rejected(
                    "wrong_type",
                    f"field {self.name!r}: items must be strings, got {json_type(item)}",
                )
            position = self._position.get(item)
            if position is not None:
                positions.add(position)
            elif not self.drop_unknown:
                raise Rejected(
                    "unknown_category",
                    f"field {self.name!r}: an item is not in the universe; add it to the "
                    "universe or set on_unknown: drop",
                )
        if len(positions) > self.max_items and not self.truncate:
            raise Rejected(
                "too_many_items",
                f"field {self.name!r}: {len(positions)} distinct items, above max_items "
                f"{self.max_items}; raise max_items or set on_too_many: truncate",
            )
        return sorted(positions)

    def _truncated(self, values: Sequence[list[int]], source: NoiseSource) -> list[list[int]]:
        """Rows over ``max_items`` cut to a uniformly random ``max_items``-subset.

        Each item gets a uniform 64-bit word; the ``max_items`` smallest win
        (a uniformly random subset; ties, probability ``< m**2 2**-64``, go
        to the lower position).
        """
        over = [row for row, positions in enumerate(values) if len(positions) > self.max_items]
        if not over:
            return list(values)
        widest = max(len(values[row]) for row in over)
        words = source.more_words(np.asarray(over, dtype=np.int64), len(self.universe), widest)
        out = list(values)
        for i, row in enumerate(over):
            items = values[row]
            keep = np.argsort(words[i, : len(items)], kind="stable")[: self.max_items]
            out[row] = sorted(items[j] for j in keep.tolist())
        return out

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        if self.truncate:
            values = self._truncated(values, source)
        bits = np.zeros((len(values), len(self.universe)), dtype=bool)
        for row, positions in enumerate(values):
            bits[row, positions] = True
        noisy = self.mechanism.release(bits, source)
        universe = self.universe
        return Column([[universe[j] for j in np.flatnonzero(row)] for row in noisy])


@dataclass(frozen=True)
class HashedHandler:
    """A string, reported as ``{"seed": s, "bucket": y}`` by optimal local hashing.

    Any string, unless a ``domain`` is given (``mechanism: auto`` chose local
    hashing for a field with a domain): then a value outside it is rejected
    as ``unknown_category``, or replaced by ``unknown_as``, as randomized
    response does.
    """

    name: str
    mechanism: Mechanism
    domain: tuple[str, ...] | None = None
    unknown_as: str | None = None
    _members: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_members", frozenset(self.domain or ()))

    def parse(self, value: object) -> str:
        if not isinstance(value, str):
            raise Rejected(
                "wrong_type", f"field {self.name!r}: expected a string, got {json_type(value)}"
            )
        # a lone surrogate (``"\ud800"``) is a string like any other: hashed as it is
        # without a domain, unknown (``unknown_as``) with one, as randomized response has it
        if self.domain is None or value in self._members:
            return value
        if self.unknown_as is not None:
            return self.unknown_as
        raise Rejected(
            "unknown_category",
            f"field {self.name!r}: value is not in the declared domain; "
            "add it to the domain or set unknown_as",
        )

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        reports = self.mechanism.release(np.asarray(values, dtype=object), source).tolist()
        return Column([{"seed": seed, "bucket": bucket} for seed, bucket in reports])


@dataclass(frozen=True)
class UnaryCategoricalHandler(CategoricalHandler):
    """A domain value in, the array of domain values whose noisy bit is 1 out
    (``categorical`` with ``mechanism: unary_encoding``, ``privstream.kinds.unary``)."""

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        indices = np.asarray(values, dtype=np.int64)
        bits = self.mechanism.release(indices, source)
        domain = self.mechanism.domain
        rows, cols = np.nonzero(bits)  # row-major: each row's values in domain order
        picked = list(map(domain.__getitem__, cols.tolist()))
        ends = np.cumsum(np.bincount(rows, minlength=len(indices))).tolist()
        starts = [0, *ends[:-1]]
        return Column(
            [picked[a:b] for a, b in zip(starts, ends, strict=True)],
            self.mechanism.noise_error(indices, bits),
        )

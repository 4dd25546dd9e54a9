"""Handlers for structured field kinds: vectors, functions, sets, hashed strings.

Same contract as ``service.pipeline.fields``: ``parse`` validates one JSON
value without quoting it in errors, ``release`` runs the mechanism over the
whole column of a batch at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from service.mechanisms import Mechanism, NoiseSource
from service.pipeline.fields import Column, Rejected, finite_number, json_type


@dataclass(frozen=True)
class VectorHandler:
    """A JSON array of exactly ``dimension`` finite numbers (vectors and sampled functions)."""

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
        return [finite_number(self.name, item) for item in value]

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        matrix = np.asarray(values, dtype=np.float64).reshape(len(values), self.dimension)
        released = self.mechanism.release(matrix, source)
        return Column(released.tolist(), self.mechanism.noise_error(matrix, released))


@dataclass(frozen=True)
class SetHandler:
    """A JSON array of distinct-or-repeated universe items, at most ``max_items`` distinct."""

    name: str
    mechanism: Mechanism
    universe: tuple[str, ...]
    max_items: int
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
            if position is None:
                raise Rejected(
                    "unknown_category",
                    f"field {self.name!r}: an item is not in the universe; add it to the universe",
                )
            positions.add(position)
        if len(positions) > self.max_items:
            raise Rejected(
                "too_many_items",
                f"field {self.name!r}: {len(positions)} distinct items, above max_items "
                f"{self.max_items}",
            )
        return sorted(positions)

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        bits = np.zeros((len(values), len(self.universe)), dtype=bool)
        for row, positions in enumerate(values):
            bits[row, positions] = True
        noisy = self.mechanism.release(bits, source)
        universe = self.universe
        return Column([[universe[j] for j in np.flatnonzero(row)] for row in noisy])


@dataclass(frozen=True)
class HashedHandler:
    """Any string, reported as ``{"seed": s, "bucket": y}`` by optimal local hashing."""

    name: str
    mechanism: Mechanism

    def parse(self, value: object) -> str:
        if not isinstance(value, str):
            raise Rejected(
                "wrong_type", f"field {self.name!r}: expected a string, got {json_type(value)}"
            )
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate from a \ud800 escape
            raise Rejected(
                "invalid_utf8", f"field {self.name!r}: string is not valid Unicode"
            ) from None
        return value

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        reports = self.mechanism.release(np.asarray(values, dtype=object), source).tolist()
        return Column([{"seed": seed, "bucket": bucket} for seed, bucket in reports])

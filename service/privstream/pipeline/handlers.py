"""Per-field handlers: parse one raw value, release a whole column at once.

``parse`` validates a single JSON value and returns it cleaned, or raises
``Rejected`` with a reason code (a low-cardinality metric label) and a
detail that names the field but never quotes the raw value. ``release``
runs the field's mechanism over the column of all parsed values of a batch
and returns a ``Column``: the JSON-ready values plus what the worker may
aggregate about them (the noise's error, the clamped count).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from privstream.errors import Rejected as Rejected  # re-exported: what parse raises
from privstream.mechanisms import Mechanism, NoiseSource
from privstream.mechanisms.base import FiniteMechanism
from privstream.mechanisms.integer_laplace import IntegerLaplaceMechanism
from privstream.mechanisms.randomized_response import DomainValue
from privstream.pipeline.encode import Choices, Encoded, Numbers, value_texts
from privstream.pipeline.long_integers import LongInteger


def json_type(value: object) -> str:
    """JSON type name of a decoded value, for messages that must not quote it."""
    names = {bool: "boolean", int: "number", float: "number", str: "string", list: "array",
             LongInteger: "number"}  # fmt: skip
    return "null" if value is None else names.get(type(value), "object")


def json_number(name: str, value: object) -> float:
    """A JSON number as a float: beyond the double range it is +-inf, never an error."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Rejected("wrong_type", f"field {name!r}: expected a number, got {json_type(value)}")
    try:
        return float(value)
    except OverflowError:  # an integer beyond the double range
        return math.inf if value > 0 else -math.inf


def clamped_number(name: str, value: object) -> float:
    """A JSON number for a noised scalar: beyond the double range it is clamped, not refused.

    ``1e999``, a 400-digit integer or one of 10,000 digits (a ``LongInteger``,
    never converted) is a valid JSON number far outside the bounds. Refusing
    it would make whether the record is released depend on the sensitive
    value (released at 1e308, dead-lettered at 1e309); it is mapped to the
    largest finite double of its sign instead, which the mechanism clamps to
    the bound like any other out-of-range value (and the clamped count
    includes it).
    """
    number = json_number(name, value)
    return number if math.isfinite(number) else math.copysign(sys.float_info.max, number)


#: levels of arrays and objects a public value may nest (``allow_nested``): what every
#: walk over it (here, in the fast path's checks, in the JSON encoders) follows safely
MAX_PUBLIC_DEPTH = 100


def nested_deeper(value: object, limit: int) -> bool:
    """Whether a decoded JSON value nests arrays and objects more than ``limit`` levels.

    Level by level, without recursion: a hostile record nested 900 deep (the
    stdlib decodes it) must not exhaust the stack of whatever walks it next.
    """
    level = [value]
    for _ in range(limit + 1):
        containers = [item for item in level if isinstance(item, list | dict)]
        if not containers:
            return False
        level = [
            child
            for container in containers
            for child in (container.values() if isinstance(container, dict) else container)
        ]
    return True


def non_finite_inside(value: object) -> bool:
    """Whether a decoded JSON value holds a number beyond the double range (at any depth):
    ``1e999``, or an integer too long to convert (``long_integers``; one of 400 digits,
    which is also beyond the double range, is copied as it always was)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, LongInteger):
        return True
    if isinstance(value, list):
        return any(map(non_finite_inside, value))
    if isinstance(value, dict):
        return any(map(non_finite_inside, value.values()))
    return False


@dataclass(frozen=True, eq=False)
class Column:
    """One released column of a batch.

    Values and error may be given as functions of no argument, called when first
    read: the fast path writes ``encoded`` and never needs a Python object per
    value, and only the canary reads the error (``privstream.pipeline.canary``).
    """

    #: the JSON-ready values (read them as ``values``), or a function giving them
    given_values: list[Any] | Callable[[], list[Any]]
    #: ``rho(Y, d)`` per row as a function of the noise alone (``Mechanism.noise_error``);
    #: None where the kind has none or the field is public (read it as ``error``)
    given_error: NDArray[np.float64] | Callable[[], NDArray[np.float64] | None] | None = None
    #: raw values that fell outside the declared bounds and were clamped
    clamped: int = 0
    #: the values as the fast encoder writes them (``privstream.pipeline.encode``), if it can
    encoded: Encoded | None = None

    @cached_property
    def values(self) -> list[Any]:
        given = self.given_values
        return given() if callable(given) else given

    @cached_property
    def error(self) -> NDArray[np.float64] | None:
        given = self.given_error
        return given() if callable(given) else given


def outside(column: NDArray[Any], lower: float, upper: float) -> int:
    """How many values of ``column`` lie outside ``[lower, upper]``."""
    return int(np.count_nonzero((column < lower) | (column > upper)))


class FieldHandler(Protocol):
    """What the batch transform needs of a field."""

    @property
    def name(self) -> str: ...

    @property
    def mechanism(self) -> Mechanism | None: ...

    def parse(self, value: object) -> Any: ...

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column: ...


@dataclass(frozen=True)
class PublicHandler:
    """Copies the value unchanged (the config declared it non-personal).

    Only a JSON scalar (string, number, boolean, null) unless ``allow_nested``:
    the allow-list names each released value (a nested one by its path), so an
    object or array under a public name would release whatever upstream nests in it.
    """

    name: str
    mechanism: Mechanism | None = None
    allow_nested: bool = False

    def parse(self, value: object) -> object:
        if not self.allow_nested and isinstance(value, dict | list):
            raise Rejected(
                "nested_public",
                f"field {self.name!r}: public fields take a string, number, boolean or null, "
                f"got {json_type(value)}; set allow_nested: true to copy objects and arrays",
            )
        if nested_deeper(value, MAX_PUBLIC_DEPTH):
            raise Rejected(
                "nested_public",
                f"field {self.name!r}: the value nests arrays and objects more than "
                f"{MAX_PUBLIC_DEPTH} levels deep, the most a public field copies",
            )
        # 1e999 decodes to inf, which has no JSON form: a public value is copied, not clamped
        if non_finite_inside(value):
            raise Rejected("not_finite", f"field {self.name!r}: number is not finite")
        return value

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        if isinstance(values, np.ndarray):  # integers, as the fast path parses them
            return Column(values.tolist, encoded=Numbers(values))
        return Column(list(values))


@dataclass(frozen=True)
class RealHandler:
    """JSON numbers; clamping to ``bounds`` happens inside the mechanism (``clamped_number``)."""

    name: str
    mechanism: Mechanism
    bounds: tuple[float, float] = (-math.inf, math.inf)

    def parse(self, value: object) -> float:
        return clamped_number(self.name, value)

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        column = np.asarray(values, dtype=np.float64)
        released = self.mechanism.release(column, source)
        return Column(
            released.tolist,
            lambda: self.mechanism.noise_error(column, released),
            outside(column, *self.bounds),
            Numbers(released),
        )


@dataclass(frozen=True)
class IntegerHandler:
    """JSON numbers as integers: a fraction is rounded (ties to even), then clamped by the
    mechanism."""

    name: str
    mechanism: IntegerLaplaceMechanism

    def parse(self, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Rejected(
                "wrong_type", f"field {self.name!r}: expected an integer, got {json_type(value)}"
            )
        if isinstance(value, float):  # 1e999 is clamped, as in RealHandler
            value = clamped_number(self.name, value)
        if isinstance(value, float) and not value.is_integer():
            # a fraction (2.5, 5e-324) is rounded to the nearest integer (ties to even), as
            # an out-of-range number is clamped: dead-lettering it would let the value
            # decide whether the record is released (2.0 is released, 2.5 would not be)
            value = round(value)
        # Python ints are unbounded, the column is int64: clamp to one step outside
        # the bounds here (still counted as clamped), the mechanism clamps the rest
        lower, upper = self.mechanism.lower, self.mechanism.upper
        return min(max(int(value), lower - 1), upper + 1)

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        column = np.asarray(values, dtype=np.int64)
        released = self.mechanism.release(column, source)
        return Column(
            released.tolist,
            lambda: self.mechanism.noise_error(column, released),
            outside(column, self.mechanism.lower, self.mechanism.upper),
            Numbers(released),
        )


@dataclass(frozen=True)
class CategoricalHandler:
    """A domain value, matched by JSON type and value (``1`` never matches ``"1"``)."""

    name: str
    mechanism: FiniteMechanism
    unknown_as: DomainValue | None = None
    _index: dict[tuple[type, object], int] = field(init=False, repr=False)
    #: the JSON text of each domain value, in domain order
    _texts: tuple[bytes, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        index = {(type(v), v): i for i, v in enumerate(self.mechanism.domain)}
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_texts", value_texts(self.mechanism.domain))

    def positions(self, kind: type) -> dict[object, int]:
        """Domain position of each domain value of JSON type ``kind`` (``str`` or ``int``)."""
        return {value: i for (t, value), i in self._index.items() if t is kind}

    def position_of(self, value: str | int) -> int | None:
        """The position ``parse`` gives a string or integer: its own, ``unknown_as``'s, or None."""
        position = self._index.get((type(value), value))
        if position is None and self.unknown_as is not None:
            return self._index[(type(self.unknown_as), self.unknown_as)]
        return position

    def parse(self, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise Rejected(
                "wrong_type",
                f"field {self.name!r}: expected a domain value, got {json_type(value)}",
            )
        position = self.position_of(value)
        if position is not None:
            return position
        raise Rejected(
            "unknown_category",
            f"field {self.name!r}: value is not in the declared domain; "
            "add it to the domain or set unknown_as",
        )

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        indices = np.asarray(values, dtype=np.int64)
        released = self.mechanism.release(indices, source)
        domain = self.mechanism.domain
        return Column(
            lambda: list(map(domain.__getitem__, released.tolist())),
            lambda: self.mechanism.noise_error(indices, released),
            encoded=Choices(released, self._texts),
        )


#: the JSON texts of the boolean domain in position order (false, true)
_BOOLEAN_TEXTS = value_texts((False, True))


@dataclass(frozen=True)
class BooleanHandler:
    """JSON true/false through binary randomized response (domain [false, true])."""

    name: str
    mechanism: FiniteMechanism

    def parse(self, value: object) -> int:
        if not isinstance(value, bool):
            raise Rejected(
                "wrong_type", f"field {self.name!r}: expected a boolean, got {json_type(value)}"
            )
        return int(value)

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        indices = np.asarray(values, dtype=np.int64)
        released = self.mechanism.release(indices, source)
        return Column(
            lambda: released.astype(bool).tolist(),
            lambda: self.mechanism.noise_error(indices, released),
            encoded=Choices(released, _BOOLEAN_TEXTS),
        )

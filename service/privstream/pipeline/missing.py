"""Absent and null values of a field with ``on_missing: impute`` or ``null``.

``MissingHandler`` wraps the kind's handler. An absent (``MISSING``) or
null value is parsed as the field's *stand-in* (``privstream.config.missing.stand_in``):

* ``impute``: the declared in-domain value, parsed by the kind's own
  ``parse`` and released by its mechanism like any other row. Nothing
  downstream can tell an imputed row from a present one: same release
  decision, same output shape, same noise distribution given the value.
* ``null``: the parsed value is None. ``release`` runs the mechanism over
  the column with those rows set to the parsed stand-in (so every row draws
  its words as before), then writes null in their place: their noised value
  is computed and never written. Presence is public under ``null``
  (docs/protection.md).

``missing_codec`` gives the fast path the same: its column parser replaces
absent and null values before the kind's parser sees the column. Under
``null`` a parsed array of scalars comes back as a masked array (``numpy.ma``: the null
rows masked, holding the parsed stand-in; its ``tolist`` has None there, the
list the reference parses), which ``release`` hands on as ``Numbers`` with
those rows as ``nulls``: the column reaches the encoder as an array, no
Python object per value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from privstream.mechanisms import Mechanism, NoiseSource
from privstream.pipeline import _columns
from privstream.pipeline.columns import MISSING, ColumnParser, Values
from privstream.pipeline.encode import Numbers
from privstream.pipeline.handlers import BooleanHandler, Column, FieldHandler
from privstream.pipeline.plan import FieldCodec


@dataclass(frozen=True)
class MissingHandler:
    """A kind's handler that takes absent and null values too (``on_missing``)."""

    inner: FieldHandler
    #: ``impute`` or ``null``
    mode: str
    #: the raw value an absent or null one stands for
    stand_in: object
    _parsed: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # config load checked the stand-in is in the domain: the kind's parse accepts it
        object.__setattr__(self, "_parsed", self.inner.parse(self.stand_in))

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def mechanism(self) -> Mechanism | None:
        return self.inner.mechanism

    def __getattr__(self, attribute: str) -> Any:
        # the kind's own attributes (bounds, dimension, domain, ...) for its
        # column parser, texts and estimator
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    @property
    def parsed_stand_in(self) -> Any:
        """The stand-in as the kind's parse gives it (a timestamp's unit index)."""
        return self._parsed

    @property
    def source(self) -> str:
        """The record key it reads (its own name)."""
        return self.inner.name

    def parse(self, value: object) -> Any:
        if value is None or value is MISSING:
            return None if self.mode == "null" else self._parsed
        return self.inner.parse(value)

    def release(self, values: Sequence[Any], source: NoiseSource) -> Column:
        if isinstance(values, np.ma.MaskedArray):  # the fast path's null rows, masked
            return self._release_masked(values, source)
        # any other parsed array (the fast path's) holds no None
        if self.mode != "null" or isinstance(values, np.ndarray):
            return self.inner.release(values, source)
        filled, nulls = _columns.replace_absent(values, None, self._parsed)  # one C loop
        if not nulls:
            return self.inner.release(values, source)
        released = self.inner.release(filled, source)
        written = list(released.values)
        for row in nulls:
            written[row] = None
        # the error is a function of the noise alone (``Mechanism.noise_error``), so the
        # null rows' draws measure it as well as the others'
        return Column(written, lambda: released.error, released.clamped)

    def _release_masked(self, values: np.ma.MaskedArray[Any, Any], source: NoiseSource) -> Column:
        """``release`` of a masked column: what the list with None in the masked rows gives."""
        nulls = np.ma.getmaskarray(values)
        filled = cast(Sequence[Any], values.filled(self._parsed))  # an array, as parsed
        released = self.inner.release(filled, source)
        form = released.encoded
        return Column(
            lambda: _nulled(released.values, nulls),
            lambda: released.error,
            released.clamped,
            replace(form, nulls=nulls) if isinstance(form, Numbers) else None,
        )


def _nulled(values: list[Any], nulls: NDArray[np.bool_]) -> list[Any]:
    """The values with None in the ``nulls`` rows."""
    out = list(values)
    for row in np.flatnonzero(nulls).tolist():
        out[row] = None
    return out


@dataclass(frozen=True)
class PresenceHandler(BooleanHandler):
    """``<source>_present``: whether field ``source`` holds a non-null value, through binary
    randomized response (``presence_epsilon``). A function of presence alone, never of the
    value, so it reads every record the same way and rejects none."""

    #: the record key whose presence it releases
    source: str = ""

    def parse(self, value: object) -> int:
        return int(value is not None and value is not MISSING)


def presence_column(handler: PresenceHandler, col: Sequence[Any]) -> tuple[Values, list[int]]:
    """The presence bit of every row; no row is left to the reference."""
    _, absent = _columns.replace_absent(col, MISSING, None)  # one C loop
    bits = np.ones(len(col), dtype=np.int64)
    bits[absent] = 0
    return bits, []


def takes_missing(handler: FieldHandler) -> bool:
    """Whether an absent field is parsed by the handler instead of dead-lettering the record."""
    return isinstance(handler, MissingHandler | PresenceHandler)


@dataclass(frozen=True)
class _MissingColumn:
    """The kind's column parser, after absent and null values are set to the stand-in."""

    inner: ColumnParser

    def __call__(self, handler: MissingHandler, col: Sequence[Any]) -> tuple[Values, list[int]]:
        filled, absent = _columns.replace_absent(col, MISSING, handler.stand_in)  # one C loop
        if not absent:
            return self.inner(handler.inner, col)
        values, bad = self.inner(handler.inner, filled)
        if handler.mode != "null":
            return values, bad
        if isinstance(values, np.ndarray) and values.ndim == 1:  # (vectors stay lists)
            nulls = np.zeros(len(values), dtype=np.bool_)
            nulls[absent] = True
            return np.ma.masked_array(values, nulls), bad
        out = values.tolist() if isinstance(values, np.ndarray) else list(values)
        for row in absent:
            out[row] = None
        return out, bad


def direct_parts(parser: ColumnParser, handler: FieldHandler) -> tuple[ColumnParser, FieldHandler]:
    """The parser and handler whose direct read (``columns.direct_column``) stands for the
    field's: the kind's own for a field with ``on_missing``. That read succeeds only where
    every record holds a value of the common kind (no absent, no null), and then gives what
    ``_MissingColumn`` gives."""
    if isinstance(parser, _MissingColumn) and isinstance(handler, MissingHandler):
        return parser.inner, handler.inner
    return parser, handler


def _texts(inner: FieldCodec) -> Any:
    def texts(handler: MissingHandler, values: list[Any]) -> list[bytes]:
        # the null rows hold a present row's value while the kind writes the column (its
        # texts are value by value), then "null"
        present = next((value for value in values if value is not None), None)
        if present is None:
            return [b"null"] * len(values)
        filled, nulls = _columns.replace_absent(values, None, present)  # one C loop
        written = inner.texts(handler.inner, filled)
        for row in nulls:
            written[row] = b"null"
        return written

    return texts


def _canary(inner: FieldCodec) -> Any:
    measure = inner.canary
    if measure is None:
        return None
    return lambda handler, count: measure(handler.inner, count)


def missing_codec(inner: FieldCodec) -> FieldCodec:
    """The kind's codec for a field that takes absent and null values."""
    return replace(
        inner, column=_MissingColumn(inner.column), texts=_texts(inner), canary=_canary(inner)
    )

"""Instants of a ``timestamp`` field: ISO 8601 text and epoch numbers to whole microseconds.

Pure time arithmetic shared by the config (bounds) and the field's handler
(``privstream.kinds.timestamp``). Everything is integer: an instant is an
``int`` of microseconds since 1970-01-01T00:00:00Z, a *unit index* is
``floor(instant / granularity)`` (Python's floor division, so negative
epochs truncate towards the past, like positive ones), and a unit is
released as its first instant. No float touches a boundary: a fractional
epoch number is read as the exact binary fraction it is (``Fraction``).

Accepted text (the extended ISO 8601 / RFC 3339 forms): ``YYYY-MM-DD``,
then optionally ``T`` (or ``t`` or a space) and ``HH:MM``, ``HH:MM:SS`` or
``HH:MM:SS.fraction`` (any number of digits; beyond microseconds they are
truncated, which never moves a unit boundary of a whole number of
microseconds), then optionally an offset ``Z``, ``+HH:MM``, ``+HHMM`` or
``+HH``. A leap second (``:60``) reads as ``:59`` of the same minute. Text
without an offset is *naive*: it is refused unless the field says
``assume_utc: true``, because guessing a zone would shift every released
unit without a trace.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Literal

import numpy as np
from numpy.typing import NDArray

#: microseconds of each granularity suffix
_UNIT_US = {"s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000, "d": 86_400_000_000}
_GRANULARITY = re.compile(r"([1-9][0-9]{0,8})([smhd])")
EpochUnit = Literal["s", "ms"]
#: microseconds of one unit of an epoch number
EPOCH_UNIT_US: dict[str, int] = {"s": 1_000_000, "ms": 1_000}
_ISO = re.compile(
    r"(\d{4}-\d{2}-\d{2})"
    r"(?:[Tt ](\d{2}:\d{2})(?::(\d{2})(?:\.(\d+))?)?"
    r"([Zz]|[+-]\d{2}(?::?\d{2})?)?)?"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
#: the instants an ISO string can name: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999Z
ISO_RANGE_US = (
    (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // _ONE_US,
    (datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC) - _EPOCH) // _ONE_US,
)


def iso_units(unit_us: int) -> tuple[int, int]:
    """(first, last) unit index whose first instant lies within ``ISO_RANGE_US``."""
    lower, upper = ISO_RANGE_US
    return -(-lower // unit_us), upper // unit_us


class BadTimestamp(ValueError):
    """Text that is no accepted timestamp; the message never quotes it."""


def granularity_us(text: str) -> int:
    """``15m`` -> microseconds; ValueError naming the accepted forms."""
    match = _GRANULARITY.fullmatch(text)
    if match is None:
        raise ValueError(
            f"granularity {text!r} is not a whole number of s, m, h or d (e.g. 1m, 15m, 1h, "
            "1d); months and years have no fixed length: use 30d or 365d, or release the "
            "date as a categorical"
        )
    return int(match.group(1)) * _UNIT_US[match.group(2)]


def parse_iso(text: str, *, assume_utc: bool) -> int:
    """ISO 8601 text -> microseconds since the epoch; BadTimestamp if not accepted."""
    match = _ISO.fullmatch(text)
    if match is None:
        raise BadTimestamp("not an ISO 8601 date-time (YYYY-MM-DDTHH:MM:SS[.f][Z|+HH:MM])")
    date, hour_minute, second, fraction, offset = match.groups()
    if offset is None and not assume_utc:
        raise BadTimestamp(
            "the timestamp has no UTC offset (Z or +HH:MM); add one upstream, or set "
            "assume_utc: true if naive times are UTC"
        )
    second = "59" if second == "60" else second  # a leap second: the minute's last second
    canonical = f"{date}T{hour_minute or '00:00'}:{second or '00'}"
    if fraction:
        canonical += f".{fraction[:6]:0<6}"
    if offset is not None:
        canonical += "+00:00" if offset in "Zz" else _colon(offset)
    try:
        parsed = datetime.fromisoformat(canonical)
    except ValueError:  # day 31 of a 30-day month, hour 25, ...
        raise BadTimestamp("not a valid calendar date and time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return (parsed - _EPOCH) // _ONE_US


def _colon(offset: str) -> str:
    """``+05`` / ``+0530`` / ``+05:30`` -> ``+05:30``."""
    digits = offset[1:].replace(":", "")
    return f"{offset[0]}{digits[:2]}:{digits[2:4] or '00'}"


def epoch_us(number: int | float, unit: str) -> int:
    """An epoch number (``unit`` s or ms) -> whole microseconds, floored.

    ``number`` is finite or +-inf (the stdlib decodes 1e999 to inf): +-inf
    maps far beyond any bounds, where the handler clamps it.
    """
    scale = EPOCH_UNIT_US[unit]
    if isinstance(number, int):
        return number * scale
    if not math.isfinite(number):
        return int(math.copysign(2**80, number))
    return math.floor(Fraction(number) * scale)


def format_iso(seconds: NDArray[np.int64]) -> list[str]:
    """Epoch seconds within ``ISO_RANGE_US`` -> ``YYYY-MM-DDTHH:MM:SSZ`` (four-digit years)."""
    texts = np.datetime_as_string(seconds.astype("datetime64[s]"), unit="s")
    return [text + "Z" for text in texts.tolist()]

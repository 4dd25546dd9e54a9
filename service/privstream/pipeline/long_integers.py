"""JSON integers too long to convert: decided by their sign and digit count alone.

CPython's ``int(str)`` takes time quadratic in the digits, and refuses more
than ``sys.get_int_max_str_digits()`` (4,300 by default) with a ``ValueError``
for that reason. Left to the stdlib, a record holding a 4,301-digit integer
was dead-lettered while one holding 4,300 digits was released: whether a
record is released depended on the sensitive value. Raising the limit would
let a 10 MB digit string hold a core for minutes.

The rule instead: an integer token of more than ``digit_bound()`` digits
(``MAX_DIGITS``, or the process's lower limit) is never converted. Such a
number lies far beyond every bound a field can declare (bounds and noise
scales stay within ``2^1002``, about ``10^302``: ``mechanisms.validation``),
beyond int64 and beyond the double range, so its sign is all a field needs:
it becomes a ``LongInteger``, an ``int`` worth ``+-10^600`` that keeps its
token. ``10^600`` is below its true magnitude (the token has more than 640
digits, the lowest limit CPython allows) and has a decimal form under any
limit. Noised numbers clamp it to the bound of its sign like ``1e999`` or a
400-digit integer (``handlers.clamped_number``, ``IntegerHandler``); a
categorical field finds it in no domain (``unknown_as`` applies); a public
field refuses it as beyond the double range (``not_finite``); a memo identity
is its token, which is canonical JSON already. Counting digits is one pass
over the token the JSON scanner has already read: linear in its length.

Only the reference decoder (``parse.decode_record``) builds one. The fast
path never sees such a token: msgspec decodes only batches shorter than the
bound (``decode``), orjson refuses any integer beyond the double range, so
the record is handed to the reference, and the C column loops
(``_columns.c``) take exact ``int`` objects only.
"""

from __future__ import annotations

import sys

#: CPython's default limit of ``int(str)``: longer integer tokens are never converted
MAX_DIGITS = 4300
#: what a ``LongInteger`` is worth (module docstring)
_MAGNITUDE = 10**600


class LongInteger(int):
    """An integer token of more than ``digit_bound()`` digits, valued ``+-10^600``.

    Only its sign stands for the number; ``text`` is the token as the record
    wrote it (a JSON integer has one spelling: no ``+``, no leading zeros).
    """

    text: str

    def __new__(cls, text: str) -> LongInteger:
        made = super().__new__(cls, -_MAGNITUDE if text.startswith("-") else _MAGNITUDE)
        made.text = text
        return made


def digit_bound() -> int:
    """The most digits converted: ``MAX_DIGITS``, or the process's lower non-zero limit."""
    limit = sys.get_int_max_str_digits()
    return MAX_DIGITS if limit == 0 else min(limit, MAX_DIGITS)


def parse_int(token: str) -> int:
    """A JSON integer token (``json.loads``'s ``parse_int``): exact, or a ``LongInteger``."""
    if len(token) - token.startswith("-") > digit_bound():
        return LongInteger(token)
    return int(token)

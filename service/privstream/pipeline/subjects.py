"""The subject column: who stands behind each raw message, for the per-subject ledger.

``subject_column(messages, field)`` gives, per message, the canonical bytes
of the subject field (``privacy.subject``), the same bytes the collector is
expected to use as the Kafka message key:

* a JSON string: its UTF-8 bytes (``"dev-7"`` -> ``b"dev-7"``);
* a JSON integer: its decimal digits (``7`` -> ``b"7"``; of any length,
  ``long_integers``), so a key ``b"7"``
  matches both ``7`` and ``"7"`` -- the key is the identity the ledger
  trusts, the field only has to agree with it;
* anything else -- missing, null, empty string, another type, a message that
  is not a JSON object -- ``None``: the ledger suppresses it (``no_subject``).

``process_batch(..., subject=field)`` computes it from its own decode
(``subject_values``, no second pass); ``subject_column`` reads raw messages
itself (one orjson pass, about a microsecond per message). What orjson refuses or may
read differently from the stdlib decoder the pipeline's reference uses
(integers beyond 64 bits come back as floats) is decoded again by that
reference decoder, so both paths agree with the record the pipeline parses.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import Any, cast

import orjson

from privstream.errors import Rejected
from privstream.pipeline import _columns
from privstream.pipeline.decode import reader
from privstream.pipeline.long_integers import LongInteger
from privstream.pipeline.parse import decode_record

#: stands for "decode this message again with the reference decoder"
_UNSURE = object()


def subject_column(messages: Sequence[bytes], field: str) -> list[bytes | None]:
    """The subject's canonical bytes per message (None where it has none), in input order."""
    try:
        objs = list(map(orjson.loads, messages))
    except (orjson.JSONDecodeError, TypeError):
        objs = None
    if objs is not None and set(map(type, objs)) <= {dict}:
        return subject_values(cast(list[dict[str, Any]], objs), messages, field)
    values = list(map(_fast_value, messages, repeat(field)))
    subjects = list(map(canonical_subject, values))
    for index, value in enumerate(values):
        if value is _UNSURE:
            subjects[index] = canonical_subject(_slow_value(messages[index], field))
    return subjects


def subject_values(
    objs: list[Any],
    messages: Sequence[bytes],
    field: str,
    where: Sequence[int] | None = None,
) -> list[bytes | None]:
    """``subject_column`` of messages decoded already into ``objs`` (dicts, or the field
    decoder's structs: ``privstream.pipeline.decode``).

    The pipeline's own decode (``process_batch(..., subject=)``) passes its
    objects here, so the subject costs no second decode. ``messages[where[i]]``
    (``messages[i]`` without ``where``): the raw bytes of ``objs[i]``, decoded
    again by the reference only for a float subject (an integer beyond 64
    bits that orjson rounded).
    """
    values = _columns.column(objs, reader(objs, field), None)  # MISSING in a struct: no str
    try:  # the common batch, one C loop (orjson's strings are exact str)
        encoded: list[bytes | None] = list(map(str.encode, cast(list[str], values)))
    except (TypeError, UnicodeEncodeError):  # a value that is no string, or a lone surrogate
        pass
    else:
        if b"" not in encoded:
            return encoded
    subjects = list(map(canonical_subject, values))
    for index, value in enumerate(values):
        if type(value) is float:
            raw = messages[index if where is None else where[index]]
            subjects[index] = canonical_subject(_slow_value(raw, field))
    return subjects


def _fast_value(raw: bytes, field: str) -> Any:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _UNSURE
    if type(obj) is not dict:
        return None
    value = obj.get(field)
    # a float may be an integer beyond 64 bits that orjson rounded
    return _UNSURE if type(value) is float else value


def _slow_value(raw: bytes, field: str) -> Any:
    try:
        return decode_record(raw).get(field)
    except Rejected:
        return None


def canonical_subject(value: Any) -> bytes | None:
    """A decoded subject value's canonical bytes (None: no subject, ``no_subject``)."""
    if isinstance(value, str):  # a subclass too: the one-pass path takes it
        return str.encode(value, "utf-8", "surrogatepass") or None  # not an override
    if type(value) is int:  # not bool
        return str(value).encode()
    if type(value) is LongInteger:  # too long to convert: its token is its digits
        return value.text.encode()
    return None

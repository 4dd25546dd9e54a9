"""Matching released records to ``--config`` field by field, by release id.

A field's release id (``privstream.pipeline.plan.release_id``) hashes
everything that shapes its output distribution: its config entry, its
(epsilon, delta) share and its calibrated parameters, but not where it sits
in the config nor which other fields exist. So a record made under an
earlier config is usable for every field whose release id is unchanged:
reordering fields or adding one keeps earlier data usable, and only a field
whose release changed is refused (its values would be debiased with the
wrong parameters and look as plausible as right ones).

The topic carries the ids in the ``privstream-field-releases`` header
(``FIELD_HEADER``), the release metadata of a file in each field's
``release_id``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

FIELD_HEADER = "privstream-field-releases"
#: why a field of another release id is refused, when nothing more is known
CHANGED = (
    "released under another release id (its config entry, its epsilon share or its "
    "calibration changed): its values would be debiased with the wrong parameters"
)
ABSENT = "not released in these records (a field added to the config since)"


class Sink(Protocol):
    """Where a record's value goes, with the fields refused for that record."""

    def __call__(self, value: bytes, refused: frozenset[str] = ..., /) -> None: ...


def parse_header(value: Any) -> dict[str, str] | None:
    """The header's ``name -> release id prefix``; None when it is not such a JSON object."""
    try:
        found = json.loads(bytes(value).decode("utf-8"))
    except (TypeError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(found, dict) or not all(isinstance(v, str) for v in found.values()):
        return None
    return found


def refused_fields(expected: Mapping[str, str], found: Mapping[str, str]) -> dict[str, str]:
    """``name -> reason`` for each expected field the records do not release as expected."""
    refused = {}
    for name, release in expected.items():
        if name not in found:
            refused[name] = ABSENT
        elif found[name] != release:
            refused[name] = CHANGED
    return refused

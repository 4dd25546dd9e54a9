"""The plan entries of ``on_missing``: the wrapped handler and the presence bit.

A field with ``on_missing: impute`` or ``null`` gets its kind's handler
wrapped (``privstream.pipeline.missing.MissingHandler``) and its kind's codec
adapted. With ``presence_epsilon`` it is followed by a presence bit, output
key ``<name>_present``: binary randomized response (the boolean kind's
release, codec and estimator) of whether the value was present, calibrated
to the bit's resolved share of the record budget.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

from privstream.config import Budget, FieldConfig
from privstream.config.missing import presence_name, stand_in
from privstream.kinds.base import FieldKind, calibrated
from privstream.kinds.finite import BOOLEAN
from privstream.mechanisms.randomized_response import RandomizedResponse
from privstream.pipeline.handlers import FieldHandler
from privstream.pipeline.missing import (
    MissingHandler,
    PresenceHandler,
    missing_codec,
    presence_column,
)
from privstream.pipeline.plan import (
    RELEASE_VERSION,
    FieldCodec,
    PlannedField,
    canonical_json,
    release_spec,
)


def with_missing(
    spec: FieldConfig, handler: FieldHandler, entry: FieldKind[Any]
) -> tuple[FieldHandler, FieldCodec]:
    """The field's handler and codec, taking absent and null values if it says so."""
    mode = getattr(spec, "on_missing", "dead_letter")
    if mode == "dead_letter":
        return handler, entry.codec
    return MissingHandler(handler, mode, stand_in(spec)), missing_codec(entry.codec)


def presence_field(spec: FieldConfig, budget: Budget) -> PlannedField | None:
    """The presence bit that follows the field, or None without ``presence_epsilon``."""
    if getattr(spec, "presence_epsilon", None) is None:
        return None
    name = presence_name(spec.name)
    share = budget.fields[name]
    eps, dlt = calibrated("presence", share)
    mechanism = RandomizedResponse(domain=(False, True), epsilon=eps, delta=dlt)
    handler = PresenceHandler(name, mechanism, source=spec.name)
    # its own digest: the field's entry (which names presence_epsilon), marked as the bit
    description = {
        "v": RELEASE_VERSION,
        "presence_of": release_spec(spec),
        "share": [share.epsilon, share.delta],
        "mechanism": type(mechanism).__name__,
        "params": mechanism.params(),
    }
    return PlannedField(
        handler=handler,
        kind=BOOLEAN.kind,
        mechanism=BOOLEAN.mechanism,
        release_id=hashlib.sha256(canonical_json(description)).digest(),
        codec=replace(BOOLEAN.codec, column=presence_column),
    )

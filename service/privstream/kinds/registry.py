"""The registry of field kinds: one ``FieldKind`` per (kind, mechanism) (``privstream.kinds``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from privstream.config.fields import FIELD_KINDS, FIELD_MODELS, mechanisms_of
from privstream.errors import RegistryError
from privstream.kinds import (
    finite,
    ordinal,
    real_ldp,
    scalar,
    square_wave,
    structured,
    subset,
    timestamp,
    unary,
)
from privstream.kinds.base import FieldKind
from privstream.pipeline.plan import PlannedField

#: kinds that are never released: no handler, nothing to register
UNRELEASED = frozenset({"drop"})
#: the mechanism value resolved before registration lookup; it has no registration of its own
AUTO = "auto"


def _index(registrations: Iterable[FieldKind[Any]]) -> dict[tuple[str, str | None], FieldKind[Any]]:
    registry: dict[tuple[str, str | None], FieldKind[Any]] = {}
    for entry in registrations:
        if entry.key in registry:
            raise RegistryError(f"field kind {entry.label} is registered twice")
        registry[entry.key] = entry
    return registry


def check_registry(registry: dict[tuple[str, str | None], FieldKind[Any]]) -> None:
    """Raise RegistryError unless registry and config models cover each other exactly."""
    expected: dict[tuple[str, str | None], type] = {}
    for kind, model in zip(FIELD_KINDS, FIELD_MODELS, strict=True):
        if kind in UNRELEASED:
            continue
        for mechanism in mechanisms_of(model) or (None,):
            if (
                mechanism != AUTO
            ):  # resolved to a registered mechanism first (privstream.kinds.auto)
                expected[(kind, mechanism)] = model
    problems = [
        f"field kind {kind}"
        + (f" with mechanism {mech}" if mech else "")
        + " has no registration; add a FieldKind for it in privstream.kinds"
        for kind, mech in expected
        if (kind, mech) not in registry
    ]
    for key, entry in registry.items():
        if key not in expected:
            problems.append(
                f"field kind {entry.label} is registered but no config model accepts it; "
                "add it to the model's kind/mechanism in privstream.config.fields"
            )
        elif entry.model is not expected[key]:
            problems.append(
                f"field kind {entry.label} is registered with model {entry.model.__name__}, "
                f"the config parses it with {expected[key].__name__}"
            )
    if problems:
        raise RegistryError("; ".join(problems))


#: the modules whose ``REGISTRATIONS`` make up the registry
_MODULES = (scalar, real_ldp, square_wave, finite, ordinal, structured, unary, subset, timestamp)
REGISTRY = _index(entry for module in _MODULES for entry in module.REGISTRATIONS)
check_registry(REGISTRY)


def registration_of(spec: object) -> FieldKind[Any]:
    """The registration of one released config field (its kind and mechanism)."""
    kind = getattr(spec, "kind", None)
    key = (str(kind), getattr(spec, "mechanism", None))
    entry = REGISTRY.get(key)
    if entry is None:
        raise RegistryError(f"field kind {key[0]} with mechanism {key[1]} has no registration")
    return entry


def registration_for(planned: PlannedField) -> FieldKind[Any]:
    """The registration a plan's field was built from."""
    entry = REGISTRY.get((planned.kind, planned.mechanism))
    if entry is None:
        raise RegistryError(f"field {planned.name!r}: no registration for its kind")
    return entry


def noised_keys() -> frozenset[tuple[str, str | None]]:
    """The keys of every noised registration: what each layer's per-kind table must cover."""
    return frozenset(key for key, entry in REGISTRY.items() if entry.mechanism is not None)


def check_table(layer: str, table: Iterable[tuple[str, str | None]]) -> None:
    """Raise RegistryError unless a layer's per-kind table covers exactly the noised kinds."""
    keys = frozenset(table)
    missing = sorted(f"{k} ({m})" for k, m in noised_keys() - keys)
    extra = sorted(f"{k} ({m})" for k, m in keys - noised_keys())
    if missing or extra:
        raise RegistryError(
            f"{layer}'s per-kind table: "
            + "; ".join(
                ([f"no entry for {', '.join(missing)}"] if missing else [])
                + ([f"entries for unregistered {', '.join(extra)}"] if extra else [])
            )
            + f"; add one entry per noised registration in {layer}"
        )

"""The field-kind registry: one ``FieldKind`` per (kind, mechanism) of the config.

Adding a mechanism means writing its module (handler, mechanism, estimator,
audit target), one ``FieldKind`` in a module's ``REGISTRATIONS`` and that
module in ``_MODULES``; nothing else switches on kinds. Loading this package checks that the
registry and the config models agree: every ``kind`` and ``mechanism`` a
config can name has exactly one registration, every registration names a
model of the config union, and every noised registration gives all its
parts (``FieldKind.__post_init__``). A gap is a ``RegistryError`` at
start-up, naming the kind and what is missing, never a silent fall-back.
"""

from __future__ import annotations

from collections.abc import Iterable

from privstream.config.fields import FIELD_KINDS, FIELD_MODELS, mechanisms_of
from privstream.errors import RegistryError
from privstream.kinds import finite, ordinal, real_ldp, scalar, structured, unary
from privstream.kinds.base import FieldKind, MemoSupport

__all__ = [
    "REGISTRY",
    "UNRELEASED",
    "FieldKind",
    "MemoSupport",
    "check_registry",
    "registration_of",
]

#: kinds that are never released: no handler, nothing to register
UNRELEASED = frozenset({"drop"})
#: the mechanism value resolved before registration lookup; it has no registration of its own
AUTO = "auto"


def _index(registrations: Iterable[FieldKind]) -> dict[tuple[str, str | None], FieldKind]:
    registry: dict[tuple[str, str | None], FieldKind] = {}
    for entry in registrations:
        if entry.key in registry:
            raise RegistryError(f"field kind {entry.label} is registered twice")
        registry[entry.key] = entry
    return registry


def check_registry(registry: dict[tuple[str, str | None], FieldKind]) -> None:
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
_MODULES = (scalar, real_ldp, finite, ordinal, structured, unary)
REGISTRY = _index(entry for module in _MODULES for entry in module.REGISTRATIONS)
check_registry(REGISTRY)


def registration_of(spec: object) -> FieldKind:
    """The registration of one released config field (its kind and mechanism)."""
    kind = getattr(spec, "kind", None)
    key = (str(kind), getattr(spec, "mechanism", None))
    entry = REGISTRY.get(key)
    if entry is None:
        raise RegistryError(f"field kind {key[0]} with mechanism {key[1]} has no registration")
    return entry

"""The field-kind registry: one ``FieldKind`` per (kind, mechanism) of the config.

Adding a mechanism means writing its module (handler, mechanism), its proof
page, one ``FieldKind`` in a module's ``REGISTRATIONS`` (that module listed
in ``registry._MODULES``), and one entry in each layer's per-kind table
(``privstream.estimate.by_kind``, ``privstream.audit.by_kind``); nothing
else switches on kinds. Loading this package checks that the
registry and the config models agree: every ``kind`` and ``mechanism`` a
config can name has exactly one registration, every registration names a
model of the config union, and every noised registration gives all its
parts (``FieldKind.__post_init__``). A gap is a ``RegistryError`` at
start-up, naming the kind and what is missing, never a silent fall-back.
"""

from privstream.kinds.base import FieldKind, MemoSupport
from privstream.kinds.plan import build_plan
from privstream.kinds.registry import (
    AUTO,
    REGISTRY,
    UNRELEASED,
    check_registry,
    check_table,
    registration_for,
    registration_of,
)

__all__ = [
    "AUTO",
    "REGISTRY",
    "UNRELEASED",
    "FieldKind",
    "MemoSupport",
    "build_plan",
    "check_registry",
    "check_table",
    "registration_for",
    "registration_of",
]

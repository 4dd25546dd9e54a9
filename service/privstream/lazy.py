"""Imported on first use (PEP 562 attributes, deferred calls): start-up pays only for what runs."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_attributes(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__``: ``name`` is imported from ``package.<where[name]>`` once,
    then kept in the package like any other attribute."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


def deferred(module: str, name: str) -> Callable[..., Any]:
    """``module.name(*args)``, its module imported at the first call, not before.

    For the parts of a field kind that only some commands call (estimators,
    audit targets, canary inputs): ``sanitize`` never imports them.
    """

    def call(*args: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args)

    call.__qualname__ = f"deferred({module}.{name})"
    return call

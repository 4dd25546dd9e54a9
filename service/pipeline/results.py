"""What a batch transform hands back: outputs, dead letters and per-field observations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class DeadLetter:
    """A record that could not be sanitized. ``detail`` never quotes raw values."""

    index: int
    reason: str
    detail: str


@dataclass(frozen=True)
class Observation:
    """What the worker may aggregate about one noised field of a batch (metrics)."""

    #: ``rho(Y, d)`` per released value, a function of the noise alone; None when the
    #: kind has no such function or the field is memoized (its noise follows the value)
    error: NDArray[np.float64] | None
    clamped: int


def merge_observations(parts: Sequence[dict[str, Observation]]) -> dict[str, Observation]:
    """The observations of several batches as if they were one."""
    merged: dict[str, Observation] = {}
    for part in parts:
        for name, seen in part.items():
            if name not in merged:
                merged[name] = seen
                continue
            before = merged[name]
            errors = [e for e in (before.error, seen.error) if e is not None]
            error = np.concatenate(errors) if errors else None
            merged[name] = Observation(error, before.clamped + seen.clamped)
    return merged


@dataclass(frozen=True)
class BatchResult:
    """Sanitized messages with their input positions, the dead letters, per-field observations."""

    outputs: list[bytes] = field(default_factory=list)
    output_index: list[int] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    #: by field name, for every field with a mechanism
    observations: dict[str, Observation] = field(default_factory=dict)

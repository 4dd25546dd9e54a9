"""What a batch transform hands back: outputs, dead letters and per-field observations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DeadLetter:
    """A record that could not be sanitized. ``detail`` never quotes raw values."""

    index: int
    reason: str
    detail: str


@dataclass(frozen=True)
class Observation:
    """What the worker may aggregate about one noised field of a batch (metrics).

    No error of a released value: with the release public, ``|y - x|`` gives
    ``x`` back. The error metrics come from shadow draws
    (``privstream.pipeline.canary``).
    """

    #: raw values outside the declared bounds (clamped): a function of raw values,
    #: exported only with noise (``privstream.clamped_counts``)
    clamped: int


def merge_observations(parts: Sequence[dict[str, Observation]]) -> dict[str, Observation]:
    """The observations of several batches as if they were one."""
    merged: dict[str, Observation] = {}
    for part in parts:
        for name, seen in part.items():
            before = merged.get(name)
            merged[name] = seen if before is None else Observation(before.clamped + seen.clamped)
    return merged


@dataclass(frozen=True)
class BatchResult:
    """Sanitized messages with their input positions, the dead letters, per-field observations."""

    outputs: list[bytes] = field(default_factory=list)
    output_index: list[int] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    #: by field name, for every field with a mechanism
    observations: dict[str, Observation] = field(default_factory=dict)
    #: with ``process_batch(..., subject=)``: each output's subject (``subjects.subject_column``)
    subjects: list[bytes | None] | None = None
    #: from ``process_block`` (file mode): the outputs as one text, each followed by a
    #: newline; ``outputs`` is then empty
    joined: bytes = b""
    #: from ``process_block(..., reads=)``: the batch's own decode, handed to file mode's
    #: aggregates (one decode a chunk): the decoded objects (structs of the fields read,
    #: ``reads`` among them, or dicts) and the input position of each
    decoded: tuple[list[Any], list[int]] | None = None

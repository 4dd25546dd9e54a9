"""A charge's changelog records, kept as columns rather than one (key, value) pair each.

A batch of ten thousand records charges about as many (subject, window)
pairs; building a key ``prefix + subject`` and a 16-byte value object for
each one only to copy them into a Kafka record batch is most of what the
changelog used to cost. ``Updates`` keeps them as they are computed: runs
of records sharing a key prefix, their names (the subjects) and their
values as the rows of one byte matrix. The worker encodes a run straight
into the record batch (``privstream.worker.record_batch``); iterating gives
the (key, value) pairs run by run, for whoever reads them one by one (tests,
the oracle, a restore of the same records).

Order matters between runs (a partition's changelog is replayed in offset
order, the last value of a key wins), never inside one: the names of a run
are distinct, so a run's records may be written in any order. The record
batch writes a run grouped by name length (a stable sort), so its byte
order may differ from the iteration order, but a replay gives the same
(and would even for a repeated name: equal names have equal lengths, so
the sort keeps them in their order).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np
import numpy.typing as npt

from privstream.errors import MisuseError

Rows = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class Run:
    """Records ``prefix + names[i] -> values[i]``; ``values`` None: all tombstones."""

    prefix: bytes
    names: Sequence[bytes]
    #: one row of bytes per name (every value of a run has the same length)
    values: Rows | None
    #: each name's length, when the charge has them at hand (the record batch groups by
    #: length; measuring them there again reads every subject anew, long out of cache)
    lengths: npt.NDArray[np.int64] | None = None

    def __post_init__(self) -> None:
        if self.values is not None and (
            self.values.ndim != 2 or len(self.values) != len(self.names)
        ):
            raise MisuseError(
                f"changelog run {self.prefix!r}: {len(self.names)} names but values of shape "
                f"{self.values.shape}; give one row per name"
            )
        if self.lengths is not None and len(self.lengths) != len(self.names):
            raise MisuseError(
                f"changelog run {self.prefix!r}: {len(self.names)} names but "
                f"{len(self.lengths)} lengths; give one length per name"
            )

    def __len__(self) -> int:
        return len(self.names)

    def pairs(self) -> Iterator[tuple[bytes, bytes | None]]:
        keys = map(self.prefix.__add__, self.names)
        if self.values is None:
            return zip(keys, repeat(None))
        return zip(keys, map(bytes, self.values), strict=True)


@dataclass
class Updates:
    """The changelog records of one partition's charge, runs in the order they are written."""

    runs: list[Run] = field(default_factory=list)

    def add(
        self,
        prefix: bytes,
        names: Sequence[bytes],
        values: Rows | None,
        lengths: npt.NDArray[np.int64] | None = None,
    ) -> None:
        """Records ``prefix + name -> row`` (distinct names; ``lengths``: of the names, if
        known); nothing when ``names`` is empty."""
        if len(names):
            self.runs.append(Run(prefix, names, values, lengths))

    def put(self, key: bytes, value: bytes | None) -> None:
        """One record."""
        rows = None if value is None else np.frombuffer(value, dtype=np.uint8).reshape(1, -1)
        self.runs.append(Run(key, [b""], rows))

    def __len__(self) -> int:
        return sum(map(len, self.runs))

    def __iter__(self) -> Iterator[tuple[bytes, bytes | None]]:
        for run in self.runs:
            yield from run.pairs()


def int64_rows(values: npt.NDArray[np.int64], width: int) -> Rows:
    """Each row of ``width`` int64s as its big-endian bytes (the changelog's values)."""
    wide = np.ascontiguousarray(values.reshape(-1, width), dtype=">i8")
    return wide.view(np.uint8).reshape(len(wide), 8 * width)

"""Test-only hook: a *seeded*, non-cryptographic noise source.

Never import this from production code. It exists so statistical tests can
use fixed seeds and state their false-failure probability. The CLI, the
config and the worker have no way to select it.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from privstream.mechanisms.rng import Words


class SeededSource:
    """Reproducible words from numpy's PCG64 (tests only)."""

    def __init__(self, seed: int) -> None:
        self._gen = np.random.Generator(np.random.PCG64(seed))

    def words(self, n: int, k: int) -> Words:
        return self._gen.integers(0, 2**64, size=(n, k), dtype=np.uint64, endpoint=False)

    def more_words(self, rows: NDArray[np.int64], start: int, k: int) -> Words:
        return self.words(len(rows), k)

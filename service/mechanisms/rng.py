"""Where the noise comes from.

Production noise is drawn from the operating system's CSPRNG
(``os.urandom`` -> ``getrandom(2)``), read in bulk: one system call per
column, so sampling stays vectorized. A seeded generator exists only in
``service.testing`` and is never reachable from the CLI or the config.

Uniforms are built from 64-bit words as ``((w >> 11) + 0.5) * 2**-53``:
53 random bits, on the open interval (0, 1), so ``log(u)`` and
``log(1 - u)`` are always finite.
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

_TWO_POW_MINUS_53 = 2.0**-53


class NoiseSource(Protocol):
    """Anything that yields independent uniforms on the open interval (0, 1)."""

    def uniform(self, n: int) -> NDArray[np.float64]:
        """Return ``n`` independent draws, uniform on (0, 1)."""
        ...


def words_to_uniform(words: NDArray[np.uint64]) -> NDArray[np.float64]:
    """Map 64-bit words to uniforms on (0, 1) with 53 bits of resolution."""
    top53 = (words >> np.uint64(11)).astype(np.float64)
    return (top53 + 0.5) * _TWO_POW_MINUS_53


class OsEntropy:
    """Uniforms from the kernel CSPRNG, read in bulk."""

    def uniform(self, n: int) -> NDArray[np.float64]:
        if n == 0:
            return np.empty(0, dtype=np.float64)
        words = np.frombuffer(os.urandom(8 * n), dtype=np.uint64)
        return words_to_uniform(words)

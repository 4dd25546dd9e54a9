"""Where the noise comes from.

Production noise is drawn from the operating system's CSPRNG
(``os.urandom`` -> ``getrandom(2)``), read in bulk: one system call per
column, so sampling stays vectorized. A seeded generator exists only in
``service.testing`` and is never reachable from the CLI or the config.

Uniforms are built from 64-bit words as ``((w >> 12) + 0.5) * 2**-52``:
52 random bits, every value ``k + 0.5`` (``k < 2**52``) exact in a double,
so the result lies in ``[2**-53, 1 - 2**-53]``, strictly inside (0, 1), and
``log(u)`` and ``log(1 - u)`` are always finite. (With 53 bits the top
values round up to exactly 1.0.)
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

_TWO_POW_MINUS_52 = 2.0**-52


class NoiseSource(Protocol):
    """Anything that yields independent uniforms on the open interval (0, 1)."""

    def uniform(self, n: int) -> NDArray[np.float64]:
        """Return ``n`` independent draws, uniform on (0, 1)."""
        ...


def words_to_uniform(words: NDArray[np.uint64]) -> NDArray[np.float64]:
    """Map 64-bit words to uniforms strictly inside (0, 1), 52 bits of resolution."""
    top52 = (words >> np.uint64(12)).astype(np.float64)
    return (top52 + 0.5) * _TWO_POW_MINUS_52


class OsEntropy:
    """Uniforms from the kernel CSPRNG, read in bulk."""

    def uniform(self, n: int) -> NDArray[np.float64]:
        if n == 0:
            return np.empty(0, dtype=np.float64)
        words = np.frombuffer(os.urandom(8 * n), dtype=np.uint64)
        return words_to_uniform(words)

"""The discrete Gaussian sampler's integer table, built exactly in vectorised numpy.

Claim: the weights ``W(z) = floor(p_f(z) 2^128)``, their log-concavity cut, the
re-centred ``W(0)`` and the cumulative thresholds are the same bits as
per-entry Python integers (a unit test keeps that construction as its
oracle): no step rounds. Weights are integers held exactly in doubles; the
split into words and 32-bit limbs, the limb sums (below ``2^52``) and the carry
propagation are exact; log-concavity is decided in doubles only where the
margin ``1 + 2^-40`` exceeds their ``4 u`` error, every other ``z`` in exact
integers.

Proof, step by step, with the function each step proves:
docs/proofs/discrete-gaussian.md.
"""

from __future__ import annotations

from typing import Final, NamedTuple

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError

#: the table's probability resolution is 2^-RESOLUTION_BITS
RESOLUTION_BITS: Final = 128
#: the weights of a table sum to this exactly
ONE: Final = 1 << RESOLUTION_BITS
_LIMB_BITS: Final = 32
_LIMBS: Final = RESOLUTION_BITS // _LIMB_BITS
_LIMB_MASK: Final = np.uint64((1 << _LIMB_BITS) - 1)
#: relative margin of the double-precision log-concavity filter (see the proof page)
_FILTER_MARGIN: Final = 1.0 + 2.0**-40


class ExactTable(NamedTuple):
    """A table for ``z = -support..support``: its thresholds and its pmf."""

    support: int
    #: ``C_j`` for ``j < 2 support``: the cdf without its final ``2^128``, as S16 big-endian
    thresholds: NDArray[np.bytes_]
    #: ``W(z) 2^-128`` rounded to doubles (exact but for ``z = 0``)
    pmf: NDArray[np.float64]


def floor_weights(reference_pmf: NDArray[np.float64]) -> NDArray[np.float64]:
    """``W(z) = floor(p_f(z) 2^128)``, exact integers held in doubles."""
    return np.floor(np.ldexp(reference_pmf, RESOLUTION_BITS))


def first_violation(floors: NDArray[np.float64], head: int) -> int | None:
    """First ``z`` in ``1..len - 2`` with ``W(z)^2 < W(z-1) W(z+1)``, or None.

    ``W(0) = head``, ``W(z) = floors[z]`` for ``z >= 1`` (exact integer doubles);
    a double filter clears all but a few candidates (proof page).
    """
    approx = floors.copy()
    approx[0] = float(head)
    inner = approx[1:-1] * approx[1:-1]
    outer = approx[:-2] * approx[2:] * _FILTER_MARGIN

    def exact(z: int) -> int:
        return head if z == 0 else int(floors[z])

    for z in (np.flatnonzero(inner <= outer) + 1).tolist():
        if exact(z) * exact(z) < exact(z - 1) * exact(z + 1):
            return int(z)
    return None


def log_concave_prefix(floors: NDArray[np.float64]) -> int:
    """Largest ``T`` such that ``W(0..T)`` (mirrored) is positive and log-concave."""
    positive = np.flatnonzero(floors)
    top = int(positive[-1]) if positive.size else 0
    # cutting at the first violation z makes W(z+1) = 0, which restores the inequality
    cut = first_violation(floors[: top + 1], int(floors[0]))
    return top if cut is None else cut


def limbs(weights: NDArray[np.float64]) -> NDArray[np.uint64]:
    """``(4, n)`` 32-bit limbs of integer doubles below ``2^128``, least significant first."""
    high = np.floor(weights * 2.0**-64)  # W div 2^64: a power-of-two scaling, then floor
    low = weights - high * 2.0**64  # W mod 2^64 (exact, proof page)
    out = np.empty((_LIMBS, len(weights)), dtype=np.uint64)
    for k, word in ((0, low.astype(np.uint64)), (2, high.astype(np.uint64))):
        out[k] = word & _LIMB_MASK
        out[k + 1] = word >> np.uint64(_LIMB_BITS)
    return out


def _int_limbs(value: int) -> list[int]:
    """The four 32-bit limbs of ``value mod 2^128``, least significant first."""
    return [(value >> (_LIMB_BITS * k)) & int(_LIMB_MASK) for k in range(_LIMBS)]


def _thresholds(half: NDArray[np.uint64]) -> NDArray[np.bytes_]:
    """Cumulative sums of the mirrored limbs ``W(T..1), W(0), W(1..T)``, last one dropped."""
    cdf = np.cumsum(np.concatenate([half[:, :0:-1], half], axis=1)[:, :-1], axis=1)
    shift = np.uint64(_LIMB_BITS)
    for k in range(_LIMBS - 1):  # carries, low limb first
        cdf[k + 1] += cdf[k] >> shift
        cdf[k] &= _LIMB_MASK
    words = np.empty((cdf.shape[1], 2), dtype=">u8")
    words[:, 0] = (cdf[3] << shift) | cdf[2]
    words[:, 1] = (cdf[1] << shift) | cdf[0]
    thresholds = words.view("S16").reshape(-1)
    thresholds.flags.writeable = False  # shared by every user of a cached sampler
    return thresholds


def build_table(reference_pmf: NDArray[np.float64], *, sigma: float) -> ExactTable:
    """The exact table for ``p_f(0..T0)``: cut at the log-concave prefix, ``W(0)`` re-centred."""
    floors = floor_weights(reference_pmf)
    support = log_concave_prefix(floors)
    weights = floors[: support + 1].copy()
    half = limbs(weights[1:])  # p_f(z) < 1/2 off the centre, so W(z) < 2^128
    head = ONE - 2 * sum(
        int(c) << (_LIMB_BITS * k) for k, c in enumerate(half.sum(axis=1).tolist())
    )
    if (
        head <= 0
        or first_violation(weights, head) is not None
        or (support >= 1 and head < int(weights[1]))
    ):  # pragma: no cover -- cannot happen
        raise MechanismError(f"discrete Gaussian table for sigma {sigma!r} is not log-concave")
    # at support 0, head = 2^128 (limbs 0) is the total, whose threshold is dropped
    centre = np.array(_int_limbs(head), dtype=np.uint64)[:, np.newaxis]
    thresholds = _thresholds(np.concatenate([centre, half], axis=1))
    weights[0] = float(head)  # rounded to nearest, like float() of the int
    pmf = np.ldexp(np.concatenate([weights[:0:-1], weights]), -RESOLUTION_BITS)
    return ExactTable(support=support, thresholds=thresholds, pmf=pmf)

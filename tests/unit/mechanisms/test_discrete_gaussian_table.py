"""The vectorised table construction gives every bit of the per-entry construction.

``ReferenceTable`` below is THE REFERENCE: the sampler's construction as it
was written with per-entry Python integers (exact by construction, slow),
copied here verbatim as the oracle. Every table attribute the sampler and its
exact privacy checks read is compared byte for byte.
"""

from __future__ import annotations

import math
from itertools import accumulate

import numpy as np
import pytest
from privstream.mechanisms.discrete_gaussian import (
    MAX_TABLE_SIGMA,
    RESOLUTION_BITS,
    DiscreteGaussianSampler,
)
from privstream.mechanisms.discrete_gaussian_table import (
    first_violation,
    limbs,
    log_concave_prefix,
)

GUIDE_BITS = 16
ONE = 1 << RESOLUTION_BITS


# --- THE REFERENCE (per-entry Python integers; do not optimise) ---------------------------


def reference_log_concave_prefix(weights: list[int]) -> int:
    top = len(weights) - 1
    while top > 0 and weights[top] == 0:
        top -= 1
    for z in range(1, top):
        if weights[z] * weights[z] < weights[z - 1] * weights[z + 1]:
            return z
    return top


class ReferenceTable:
    """``DiscreteGaussianSampler.__init__`` before vectorisation (the table part)."""

    def __init__(self, s: float) -> None:
        self.sigma = s
        start = math.ceil(12.0 * s) + 1
        z = np.arange(start + 1, dtype=np.float64)
        unnormalised = np.exp(-(z * z) / (2.0 * s * s))
        normaliser = float(unnormalised[0]) + 2.0 * math.fsum(unnormalised[1:].tolist())
        self.reference_pmf = unnormalised / normaliser
        weights = [int(w) for w in np.floor(np.ldexp(self.reference_pmf, 128)).tolist()]
        support = reference_log_concave_prefix(weights)
        weights = weights[: support + 1]
        weights[0] = ONE - 2 * sum(weights[1:])
        assert weights[0] > 0
        assert all(
            weights[t] * weights[t] >= weights[t - 1] * weights[t + 1] for t in range(1, support)
        )
        assert support < 1 or weights[0] >= weights[1]
        self.support = support
        self.full = weights[:0:-1] + weights
        cdf = list(accumulate(self.full))
        self._thresholds = np.frombuffer(
            b"".join(c.to_bytes(16, "big") for c in cdf[:-1]), dtype="S16"
        )
        self.values = np.arange(-support, support + 1, dtype=np.int64)
        self.pmf = np.ldexp(np.array([float(w) for w in self.full]), -128)
        self._log_pmf = np.log(self.pmf)
        self.variance = float(np.sum(self.pmf * self.values.astype(np.float64) ** 2))


# --- the comparison -----------------------------------------------------------------------

#: (the guide table over ``_thresholds`` is built by unchanged code, tested with the sampler)
ARRAYS = ("reference_pmf", "_thresholds", "values", "pmf", "_log_pmf")
#: (the vector constants are unchanged code over ``support`` and ``reference_pmf``)
SCALARS = ("sigma", "support", "variance")
#: the two tables of a 128-d vector config at epsilon 1, delta 1e-6 (bench/file_mode.py)
VECTOR_SIGMAS = [4690.879190932556, 4690.891480764906]
RANDOM_SIGMAS = np.exp(np.random.default_rng(17).uniform(math.log(0.02), math.log(3e4), 20))
SIGMAS = [
    *(0.01, 0.05, 0.3, 1.0, 2.5, 10.0, 100.7, 1234.5),
    *VECTOR_SIGMAS,
    *(2e4, 3e4, MAX_TABLE_SIGMA),
    *RANDOM_SIGMAS.tolist(),
]


@pytest.mark.parametrize("sigma", SIGMAS)
def test_table_is_bit_for_bit_the_reference_construction(sigma: float) -> None:
    fast, slow = DiscreteGaussianSampler(sigma), ReferenceTable(sigma)
    for name in ARRAYS:
        mine, theirs = getattr(fast, name), getattr(slow, name)
        assert mine.dtype == theirs.dtype, name
        assert mine.shape == theirs.shape, name
        assert mine.tobytes() == theirs.tobytes(), name
    for name in SCALARS:
        mine, theirs = getattr(fast, name), getattr(slow, name)
        assert type(mine) is type(theirs), name
        # == on floats, and the same bits (== alone would accept -0.0 for 0.0)
        assert mine == theirs, name
        assert np.array(mine).tobytes() == np.array(theirs).tobytes(), name
    assert fast.weights() == tuple(slow.full)
    assert not fast._thresholds.flags.writeable  # the exact checks read what sample() searches


def test_reference_covers_the_cut_the_empty_table_and_the_largest_table() -> None:
    """The spread above reaches every branch: no cut, a log-concavity cut, support 0."""
    cut = [s for s in SIGMAS if ReferenceTable(s).support < math.ceil(12.0 * s) + 1]
    assert 0.01 in SIGMAS and DiscreteGaussianSampler(0.01).support == 0
    assert len(cut) >= 10
    assert any(s >= 2e4 for s in cut)


# --- the exact log-concavity check on adversarial weights ---------------------------------


def as_doubles(ints: list[int]) -> np.ndarray:
    floors = np.array([float(w) for w in ints])
    assert [int(w) for w in floors.tolist()] == ints  # exact doubles, as the sampler's are
    return floors


def adversarial_rows() -> list[list[int]]:
    """Ties (geometric rows: W(z)^2 == W(z-1) W(z+1) exactly), near-ties closer than the
    double filter can see, zeros, and floored Gaussians cut off at 2^-128 like the table's."""
    rng = np.random.default_rng(23)
    rows: list[list[int]] = [
        [2**k for k in range(127, 60, -1)],  # all ties
        [3**k * 2 ** (20 * (10 - k)) for k in range(10)],  # ties with odd factors
        [5, 0, 5],
        [5, 3, 0, 0],
        [0, 0, 0],
        [1],
    ]
    for _ in range(100):
        m = 2**50 + int(rng.integers(0, 2**50))
        # m^2 - a b in {1, 0, -m, -m}: closer than 2^-40 relative, so the double filter
        # passes them all to the exact check, which must tell them apart
        a, b = [(m - 1, m + 1), (m, m), (m, m + 1), (m + 1, m)][int(rng.integers(0, 4))]
        rows.append([a << 60, m << 60, b << 60])
    for sigma in np.exp(rng.uniform(0.0, math.log(3000.0), 100)).tolist():
        z = np.arange(math.ceil(12.0 * sigma) + 2, dtype=np.float64)
        floors = np.floor(np.ldexp(np.exp(-(z * z) / (2.0 * sigma * sigma)) / sigma, 126))
        rows.append([int(w) for w in floors.tolist()])
    return rows


def test_log_concavity_check_equals_exact_integers() -> None:
    found = 0
    for row in adversarial_rows():
        floors = as_doubles(row)
        expected = next(
            (z for z in range(1, len(row) - 1) if row[z] * row[z] < row[z - 1] * row[z + 1]),
            None,
        )
        assert first_violation(floors, row[0]) == expected, row
        assert log_concave_prefix(floors) == reference_log_concave_prefix(row), row
        found += expected is not None
    assert 50 <= found <= 150  # both outcomes are exercised


def test_log_concavity_check_reads_the_exact_head_not_its_double() -> None:
    """W(0) = 2^128 - 2 sum W(z) is no double: rounding it would hide this violation."""
    w1, w2 = 2**64, 2**0
    head = w1 * w1 // w2 - 1  # W(1)^2 = head W(2) + 2^0: no violation; head + 1 ties
    assert float(head) == float(head + 2)
    floors = np.array([float(head), float(w1), float(w2)])
    assert first_violation(floors, head) is None
    assert first_violation(floors, head + 2) == 1


# --- 128-bit integers as 32-bit limbs ------------------------------------------------------


def test_limbs_of_integer_doubles_are_their_exact_digits() -> None:
    """Every 53-bit mantissa position below 2^128, words at and above 2^63 included."""
    rng = np.random.default_rng(29)
    mantissas = rng.integers(2**52, 2**53, 3000).tolist()
    shifts = rng.integers(0, 76, 3000).tolist()
    edges = [0, 1, 2**63, 2**64 - 2**11, 2**64, 2**64 + 2**12, 2**127, 2**128 - 2**75]
    values = edges + [m << s for m, s in zip(mantissas, shifts, strict=True)]
    got = limbs(as_doubles(values))
    assert got.shape == (4, len(values))
    digits = [[(v >> (32 * k)) & (2**32 - 1) for k in range(4)] for v in values]
    assert got.T.tolist() == digits

"""Optimal local hashing (OLH) for string fields with an open or large domain.

Claim: pure local ``eps``-DP (``delta = 0``) for any two values, for the words
actually used: given the seed, the ratio of report probabilities is at most
``p/q = e^eps``, for any hash.

Release ``(s, y)``: a per-record uniform 64-bit seed ``s``, the bucket
``x = H_s(v) = splitmix64(BLAKE2b_8(UTF-8(v)) XOR s) mod g`` (fixed, keyless,
public), and randomized response over the ``g`` buckets; the raw value never
leaves the worker.

Calibration (Wang et al. 2017, Sec. 4): ``g = round(e^eps) + 1`` (``g - 1`` at
most ``2**32``), ``p = e^eps / (e^eps + g - 1)``; the flip threshold ``T`` is
randomized response's (``randomized_response.flip_threshold``, exact
rationals) and construction checks the realised divergence at ``eps`` is 0.

Sampler contract: three 64-bit words per record, one ``words`` call: ``w0``
the seed, flip iff ``w1 < T``, ``w2 mod (g - 1)`` the other bucket.

Error ``1 - p``, equal to the lower bound on the bucket domain (Thm. 5.5,
Ex. 5.7); ``estimate_frequencies`` debiases ``c(v) = #{i : H_{s_i}(v) = y_i}``.

A lone surrogate (``"\\ud800"``, valid JSON) is hashed ``surrogatepass``: a
string like any other, so whether a record is released never depends on it.

Proof, step by step, with the function each step proves:
docs/proofs/local-hashing.md.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from privstream.errors import MechanismError
from privstream.mechanisms._thresholds import support
from privstream.mechanisms.base import Mechanism, exp_neg, finite_gamma
from privstream.mechanisms.randomized_response import flip_threshold, realised_delta
from privstream.mechanisms.rng import NoiseSource
from privstream.mechanisms.validation import check_epsilon

#: ``g - 1`` never exceeds this (collision probability 2**-32)
MAX_OTHER_BUCKETS = 2**32
#: column of the released array holding the per-record hash seed
SEED_COLUMN = 0
#: column of the released array holding the reported bucket
BUCKET_COLUMN = 1
#: noise words drawn per record: seed, flip decision, other bucket
WORDS_PER_RECORD = 3

_TWO_64 = 2**64
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def olh_buckets(epsilon: float) -> int:
    """``g = round(e^eps) + 1``, with ``g - 1`` capped at ``2**32``."""
    eps = check_epsilon(epsilon)
    if eps >= math.log(MAX_OTHER_BUCKETS):
        return MAX_OTHER_BUCKETS + 1
    return min(math.floor(math.exp(eps) + 0.5), MAX_OTHER_BUCKETS) + 1


def olh_keep_probability(epsilon: float, buckets: int) -> float:
    """``p = e^eps / (e^eps + g - 1)``, written as ``1 / (1 + (g-1) e^-eps)``."""
    return 1.0 / (1.0 + (buckets - 1) * exp_neg(epsilon))


def splitmix64(z: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """The splitmix64 output function (Steele et al.; Stafford's Mix13), mod 2**64."""
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def value_digests(values: Iterable[Any]) -> NDArray[np.uint64]:
    """``h(v)``: BLAKE2b-64 of the UTF-8 bytes, little-endian, one per value.

    Raises ``MechanismError`` (naming the position, never the value) for a
    value that is not a string. Lone surrogates are hashed ``surrogatepass``
    (module docstring).
    """
    digests: list[int] = []
    for position, value in enumerate(values):
        if not isinstance(value, str):
            raise MechanismError(
                f"local hashing needs strings; value at position {position} is a "
                f"{type(value).__name__}"
            )
        data = value.encode("utf-8", "surrogatepass")
        digests.append(int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little"))
    return np.array(digests, dtype=np.uint64)


def hash_to_bucket(
    seeds: NDArray[np.uint64], digests: NDArray[np.uint64], buckets: int
) -> NDArray[np.uint64]:
    """``H_s(v) = splitmix64(h(v) XOR s) mod g``; broadcasts ``seeds`` against ``digests``."""
    mixed = splitmix64(np.asarray(digests, dtype=np.uint64) ^ np.asarray(seeds, dtype=np.uint64))
    return mixed % np.uint64(buckets)


class OptimalLocalHashing(Mechanism):
    """OLH: per-record seeded hash into ``g`` buckets, then ``g``-ary randomized response."""

    name: ClassVar[str] = "local_hashing"
    metric: ClassVar[str] = "discrete on the hashed report (0 if bucket == H_seed(value), else 1)"

    def __init__(self, *, epsilon: float) -> None:
        super().__init__(epsilon=check_epsilon(epsilon), delta=0.0)
        self.buckets = olh_buckets(self.epsilon)
        others = self.buckets - 1
        threshold = flip_threshold(others, self.epsilon, 0.0)
        if realised_delta(threshold, others, self.epsilon) > 0:  # pragma: no cover -- eps > 0.4
            raise MechanismError(f"local hashing at epsilon {self.epsilon:g} is not certified")
        self._flip_threshold = np.uint64(threshold)
        #: the realised flip probability ``T / 2**64`` and the derived report probabilities
        self.flip_probability = threshold / _TWO_64
        self.keep_probability = 1.0 - self.flip_probability
        self.q = self.flip_probability / others

    @property
    def expected_error(self) -> float:
        return self.flip_probability

    @property
    def gamma_lower_bound(self) -> float:
        # Theorem 5.5 on the buckets: m = g - 1, kappa = 1, delta = 0
        return finite_gamma(self.buckets - 1, self.epsilon, 0.0)

    def frequency_variance(self, n: int, frequency: float) -> float:
        """Exact ``Var[f_hat]`` given the data, for a value held by a share ``frequency``."""
        if n < 1:
            raise MechanismError(f"the estimator needs at least one record, got n = {n}")
        p, q_star = self.keep_probability, 1.0 / self.buckets
        spread = frequency * p * (1.0 - p) + (1.0 - frequency) * q_star * (1.0 - q_star)
        return spread / (n * (p - q_star) ** 2)

    def estimator_variance(self, n: int) -> float:
        # linear in f: the worst case is at f = 0 or f = 1
        return max(self.frequency_variance(n, 0.0), self.frequency_variance(n, 1.0))

    def params(self) -> dict[str, float | int | str]:
        return {
            "buckets": self.buckets,
            "keep_probability": self.keep_probability,
            "q": self.q,
            "hash": "splitmix64(blake2b64(utf8(v)) ^ seed) mod buckets",
        }

    def release(self, values: NDArray[Any], source: NoiseSource) -> NDArray[np.uint64]:
        """Sanitize a column of strings into ``(seed, bucket)`` rows, ``(n, 2)`` uint64."""
        column = np.asarray(values, dtype=object)
        if column.ndim != 1:
            raise MechanismError(f"expected a 1-D column of strings, got shape {column.shape}")
        digests = value_digests(column)
        n = len(digests)
        words = source.words(n, WORDS_PER_RECORD)
        seeds = words[:, 0]
        true_bucket = hash_to_bucket(seeds, digests, self.buckets)
        flip = words[:, 1] < self._flip_threshold
        other = words[:, 2] % np.uint64(self.buckets - 1)
        other += (other >= true_bucket).astype(np.uint64)  # skip over the true bucket
        out = np.empty((n, 2), dtype=np.uint64)
        out[:, SEED_COLUMN] = seeds
        out[:, BUCKET_COLUMN] = np.where(flip, other, true_bucket)
        return out


def support_counts(
    seeds: NDArray[np.uint64], buckets: NDArray[np.uint64], digests: NDArray[np.uint64], g: int
) -> NDArray[np.int64]:
    """Per candidate digest, the reports that support it: ``#{i : H_seed_i(v) == bucket_i}``.

    ``hash_to_bucket``'s hash in one fused C loop (``_thresholds.support``: a
    divisibility test in place of the remainder, docs/proofs/local-hashing.md
    step 4), the reports split over two threads (the loop releases the GIL):
    the n x k hashes are the whole cost of an estimate. Raises
    ``MechanismError`` for arrays that are not 1-D uint64, seeds and buckets of
    different lengths, ``g`` outside ``2..2**32 + 1`` or a bucket not below ``g``.
    """
    _check_reports(seeds, buckets, digests, g)
    seeds, buckets = np.ascontiguousarray(seeds), np.ascontiguousarray(buckets)
    digests = np.ascontiguousarray(digests)
    half = len(seeds) // 2
    shares = (slice(0, half), slice(half, len(seeds)))
    counts = np.empty((len(shares), len(digests)), dtype=np.int64)

    def count(row: int) -> None:
        share = shares[row]
        support(seeds[share], buckets[share], digests, int(g), counts[row])

    with ThreadPoolExecutor(max_workers=len(shares)) as pool:
        list(pool.map(count, range(len(shares))))  # list(): a thread's error is raised here
    result: NDArray[np.int64] = counts.sum(axis=0)
    return result


def _check_reports(
    seeds: NDArray[np.uint64], buckets: NDArray[np.uint64], digests: NDArray[np.uint64], g: int
) -> None:
    """``support_counts``' arguments, refused with ``MechanismError`` naming the fix."""
    for name, array in (("seeds", seeds), ("buckets", buckets), ("digests", digests)):
        if not isinstance(array, np.ndarray) or array.dtype != np.uint64 or array.ndim != 1:
            got = (
                f"{array.dtype} of shape {array.shape}"
                if isinstance(array, np.ndarray)
                else type(array).__name__
            )
            raise MechanismError(
                f"support_counts: {name} must be a 1-D uint64 array, got {got}; pass "
                "numpy.asarray(..., dtype=numpy.uint64).ravel()"
            )
    if len(seeds) != len(buckets):
        raise MechanismError(
            f"support_counts: {len(seeds)} seeds but {len(buckets)} buckets; pass one bucket "
            "per seed (the two columns of the same releases)"
        )
    if not 2 <= g <= MAX_OTHER_BUCKETS + 1:
        raise MechanismError(
            f"support_counts: g = {g} buckets is outside 2..{MAX_OTHER_BUCKETS + 1}; pass "
            "olh_buckets(epsilon) of the releases"
        )
    if len(buckets) and int(buckets.max()) >= g:
        raise MechanismError(
            f"support_counts: a bucket of {int(buckets.max())} is not below g = {g}; were the "
            "reports made at this epsilon?"
        )


def estimate_frequencies(
    seeds: NDArray[np.uint64],
    buckets: NDArray[np.uint64],
    candidates: Sequence[str],
    epsilon: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Debiased frequency of each candidate string, and its standard error.

    ``seeds`` and ``buckets`` are the two columns of OLH releases made at
    ``epsilon``. ``f_hat = (c/n - 1/g) / (p - 1/g)`` with ``c`` the number of
    reports that support the candidate; the standard error is the exact
    variance given the data evaluated at ``f_hat`` clipped to [0, 1] (see the proof
    page). Estimates themselves are not clipped: clipping would
    bias them.
    """
    if isinstance(candidates, str):
        raise MechanismError("candidates must be a sequence of strings, not one string")
    seed_arr = np.asarray(seeds, dtype=np.uint64).ravel()
    bucket_arr = np.asarray(buckets, dtype=np.uint64).ravel()
    if seed_arr.shape != bucket_arr.shape:
        raise MechanismError(f"{len(seed_arr)} seeds but {len(bucket_arr)} buckets")
    n = len(seed_arr)
    if n == 0:
        raise MechanismError("no reports to estimate from")
    g = olh_buckets(epsilon)
    p = olh_keep_probability(epsilon, g)
    if np.any(bucket_arr >= np.uint64(g)):
        raise MechanismError(f"a bucket is outside 0..{g - 1}; were reports made at this epsilon?")
    counts = support_counts(seed_arr, bucket_arr, value_digests(candidates), g)
    q_star = 1.0 / g
    scale = p - q_star
    estimates = (counts / n - q_star) / scale
    f = np.clip(estimates, 0.0, 1.0)
    spread = f * p * (1.0 - p) + (1.0 - f) * q_star * (1.0 - q_star)
    stderr = np.sqrt(spread / n) / scale
    return estimates, stderr

"""The local protocols ``bench/utility.py`` measures privstream against, in numpy.

Frequencies: GRR (k-ary randomized response), OUE (every bit drawn), OLH
(a pairwise-independent hash ``((a v + b) mod (2^31 - 1)) mod g`` per
record) and SS (Subset Selection, Wang et al. 2016: ``d`` values by random
keys, ``d`` the best for the summed variance) and HR (Hadamard response,
Acharya, Sun and Zhang 2019), with their unbiased estimators and exact
expected MSE; pure-ldp's
clients and servers as a check of them. Means: Duchi et al.'s mechanism, the
Piecewise and Hybrid Mechanisms (Wang et al. 2019, Sec. III-B/C) and numpy
Laplace, with each report's exact variance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

PRIME = 2**31 - 1

Ints = NDArray[np.int64]
Floats = NDArray[np.float64]
Protocol = Callable[[Ints, int, float, np.random.Generator], Floats]


# --- frequency anchors (numpy; unbiased estimators) -----------------------------------------


def grr(x: Ints, k: int, eps: float, rng: np.random.Generator) -> Floats:
    e = np.exp(eps)
    keep, other = e / (e + k - 1), 1 / (e + k - 1)
    flip = rng.random(len(x)) >= keep
    y = np.where(flip, (x + 1 + rng.integers(0, k - 1, len(x))) % k, x)
    counts = np.bincount(y, minlength=k)
    return (counts / len(x) - other) / (keep - other)  # type: ignore[no-any-return]


def oue(x: Ints, k: int, eps: float, rng: np.random.Generator) -> Floats:
    p, q = 0.5, 1 / (np.exp(eps) + 1)
    counts = np.zeros(k)
    for start in range(0, len(x), 10_000):  # every bit of every record, 10^7 at a time
        chunk = x[start : start + 10_000]
        bits = rng.random((len(chunk), k)) < q
        bits[np.arange(len(chunk)), chunk] = rng.random(len(chunk)) < p
        counts += bits.sum(axis=0)
    return (counts / len(x) - q) / (p - q)  # type: ignore[no-any-return]


def olh(x: Ints, k: int, eps: float, rng: np.random.Generator) -> Floats:
    e = np.exp(eps)
    g = round(float(e)) + 1
    keep = e / (e + g - 1)
    a = rng.integers(1, PRIME, len(x))
    b = rng.integers(0, PRIME, len(x))
    hashed = ((a * x + b) % PRIME) % g
    flip = rng.random(len(x)) >= keep
    y = np.where(flip, (hashed + 1 + rng.integers(0, g - 1, len(x))) % g, hashed)
    support = np.zeros(k)
    for start in range(0, k, 100):  # candidates 100 at a time: 10^7 hashes
        v = np.arange(start, min(start + 100, k))
        support[v] = (((a[:, None] * v + b[:, None]) % PRIME) % g == y[:, None]).sum(axis=0)
    return (support / len(x) - 1 / g) / (keep - 1 / g)  # type: ignore[no-any-return]


def ss_size(k: int, eps: float) -> int:
    """The ``d`` in ``1..k-1`` with the least exact MSE (searched, not privstream's code)."""
    return min(range(1, k), key=lambda d: _summed(*ss_probabilities(k, eps, d), k))


def ss_probabilities(k: int, eps: float, d: int) -> tuple[float, float]:
    """SS's chance that a record holding the value, and one holding another, report it."""
    e = float(np.exp(eps))
    keep = d * e / (d * e + k - d)
    return keep, (keep * (d - 1) + (1 - keep) * d) / (k - 1)


def ss(x: Ints, k: int, eps: float, rng: np.random.Generator) -> Floats:
    d = ss_size(k, eps)
    keep, other = ss_probabilities(k, eps, d)
    counts = np.zeros(k)
    for start in range(0, len(x), 10_000):  # a random key per value of every record
        chunk = x[start : start + 10_000]
        rows = np.arange(len(chunk))
        keys = rng.random((len(chunk), k))
        # the true value first when it is included, never when it is not; then the d
        # smallest keys are it and d - 1 uniform others, or d uniform others
        keys[rows, chunk] = np.where(rng.random(len(chunk)) < keep, -1.0, 2.0)
        chosen = np.argpartition(keys, d - 1, axis=1)[:, :d]
        counts += np.bincount(chosen.ravel(), minlength=k)
    return (counts / len(x) - other) / (keep - other)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class HadamardLayout:
    """Hadamard response (Acharya, Sun and Zhang 2019), its general-privacy form.

    ``B = 2^floor(log2(min(2k, e^eps)))`` blocks of ``b = 2^ceil(log2(k / B + 1))``
    outputs; value ``x`` is row ``p = x mod (b - 1) + 1`` of the ``b x b``
    Hadamard matrix in block ``x // (b - 1)``: its set ``S_x`` is the ``s = b/2``
    outputs of that block where the row is +1. A report is each output of
    ``S_x`` with weight ``e^eps``, any other of the ``K = B b`` with weight 1.
    ``B = 1`` is the high-privacy form (pure-ldp's choice at eps <= 1 too).
    """

    blocks: int
    size: int
    e: float

    @classmethod
    def of(cls, k: int, eps: float) -> HadamardLayout:
        e = float(np.exp(eps))
        blocks = 2 ** int(np.floor(np.log2(min(2 * k, e))))
        return cls(blocks, 2 ** int(np.ceil(np.log2(k / blocks + 1))), e)

    def probabilities(self) -> tuple[tuple[float, float], ...]:
        """``(P(y in S_x), P(y in x's block))`` for a record holding x, another value of
        x's block, and a value of another block."""
        s, out = self.size / 2, self.blocks * self.size
        z = s * self.e + out - s
        same = s * (self.e + 1) / z
        return (s * self.e / z, same), (same / 2, same), (s / z, 2 * s / z)

    def weights(self) -> tuple[float, float]:
        """The unbiased estimate is ``c_set 1[y in S_x] + c_block 1[y in block] + const``."""
        (a1, b1), (a2, _), (a3, b3) = self.probabilities()
        c_set = 1 / (a1 - a2)
        return c_set, (0.0 if self.blocks == 1 else -(a2 - a3) * c_set / (b1 - b3))


def hr(x: Ints, k: int, eps: float, rng: np.random.Generator) -> Floats:
    lay = HadamardLayout.of(k, eps)
    block, row = x // (lay.size - 1), x % (lay.size - 1) + 1
    s, out = lay.size / 2, lay.blocks * lay.size
    in_set = rng.random(len(x)) < s * lay.e / (s * lay.e + out - s)
    # outside S_x: x's own block w.p. s / (K - s), else uniform over the other blocks
    own = in_set | (rng.random(len(x)) * (out - s) < s)
    other = (block + 1 + rng.integers(0, max(lay.blocks - 1, 1), len(x))) % lay.blocks
    column = rng.integers(0, lay.size, len(x))
    # flipping the bit of the row's lowest 1 moves a column between the row's halves
    wrong = (np.bitwise_count(row & column) % 2 == 0) != in_set
    column = np.where(own & wrong, column ^ (row & -row), column)
    counts = np.bincount(np.where(own, block, other) * lay.size + column, minlength=out)
    transformed = _walsh_hadamard(counts.reshape(lay.blocks, lay.size).astype(np.float64))
    in_block = transformed[:, 0]
    values = np.arange(k)
    blk, pos = values // (lay.size - 1), values % (lay.size - 1) + 1
    set_share = (in_block[blk] + transformed[blk, pos]) / 2 / len(x)
    (_, _), (a2, _), (a3, b3) = lay.probabilities()
    c_set, c_block = lay.weights()
    # one block: every record is in x's block, so the "other" term is the block's own
    offset = a2 if lay.blocks == 1 else a3
    return c_set * (set_share - offset) + c_block * (in_block[blk] / len(x) - b3)  # type: ignore[no-any-return]


def _walsh_hadamard(rows: Floats) -> Floats:
    """Each row times the Sylvester Hadamard matrix (``H[p, c] = (-1)^popcount(p & c)``)."""
    out, width, h = rows.copy(), rows.shape[1], 1
    while h < width:
        pairs = out.reshape(len(rows), width // (2 * h), 2, h)
        low, high = pairs[:, :, 0, :].copy(), pairs[:, :, 1, :]
        pairs[:, :, 0, :] += high
        pairs[:, :, 1, :] = low - high
        h *= 2
    return out


def hr_mse(truth: Floats, eps: float, n: int) -> float:
    """HR's exact expected summed squared error on this truth (it depends on the block masses).

    Per record the estimate of ``f_x`` adds ``g(y) = c_set 1[y in S_x] + c_block
    1[y in block]``; its variance over the three kinds of record (``x``, another
    value of x's block, another block) is weighted by their shares.
    """
    k = len(truth)
    lay = HadamardLayout.of(k, eps)
    c_set, c_block = lay.weights()
    var = []
    for p_set, p_block in lay.probabilities():
        mean = c_set * p_set + c_block * p_block
        second = (c_set + c_block) ** 2 * p_set + c_block**2 * (p_block - p_set)
        var.append(second - mean**2)
    block = np.arange(k) // (lay.size - 1)
    mass = np.bincount(block, weights=truth)[block]
    total = truth * var[0] + (mass - truth) * var[1] + (1 - mass) * var[2]
    return float(total.sum() / n)


def pure_ldp(kind: str) -> Protocol:
    """pure-ldp's client and server over the records (1-based items, its default mapping)."""

    def run(x: Ints, k: int, eps: float, rng: np.random.Generator) -> Floats:
        from pure_ldp.frequency_oracles.direct_encoding import DEClient, DEServer
        from pure_ldp.frequency_oracles.local_hashing import LHClient, LHServer
        from pure_ldp.frequency_oracles.unary_encoding import UEClient, UEServer

        np.random.seed(int(rng.integers(2**31)))  # pure-ldp draws from numpy's global state
        pair: dict[str, tuple[Any, Any]] = {
            "DE": (DEClient(eps, k), DEServer(eps, k)),
            "UE": (UEClient(eps, k, use_oue=True), UEServer(eps, k, use_oue=True)),
            "LH": (LHClient(eps, k, use_olh=True), LHServer(eps, k, use_olh=True)),
        }
        client, server = pair[kind]
        for item in (x + 1).tolist():
            server.aggregate(client.privatise(item))
        counts = [server.estimate(i, suppress_warnings=True) for i in range(1, k + 1)]
        return np.asarray(counts, dtype=np.float64) / len(x)

    return run


NUMPY: dict[str, Protocol] = {"GRR": grr, "OUE": oue, "OLH": olh, "SS": ss, "HR": hr}
PURE_LDP = {"GRR": "DE", "OUE": "UE", "OLH": "LH"}


def exact_mse(protocol: str, k: int, eps: float, n: int) -> float:
    """``(A + (k - 1) B) / n``: the expected summed squared error given the data, any truth.

    ``keep`` and ``other`` are the chances that a record holding the value,
    and one holding another value, support it; an unbiased estimator's
    variance is ``(f keep (1 - keep) + (1 - f) other (1 - other)) / (n (keep
    - other)^2)``, linear in the share ``f``, which sums to 1 over the values.
    """
    e = float(np.exp(eps))
    if protocol == "GRR":
        keep, other = e / (e + k - 1), 1 / (e + k - 1)
    elif protocol == "OUE":
        keep, other = 0.5, 1 / (e + 1)
    elif protocol == "SS":
        keep, other = ss_probabilities(k, eps, ss_size(k, eps))
    else:  # OLH, with an ideal hash: a record holding another value supports it w.p. 1/g
        g = round(e) + 1
        keep, other = e / (e + g - 1), 1 / g
    return _summed(keep, other, k) / n


def _summed(keep: float, other: float, k: int) -> float:
    return (keep * (1 - keep) + (k - 1) * other * (1 - other)) / (keep - other) ** 2


# --- mean anchors (numpy, Wang et al. 2019) -------------------------------------------------


def duchi(t: Floats, eps: float, rng: np.random.Generator) -> Floats:
    """Duchi et al.: +-C with P(+C) = 1/2 + t (e - 1) / (2 (e + 1)), C = (e + 1)/(e - 1)."""
    e = np.exp(eps)
    c = (e + 1) / (e - 1)
    up = rng.random(len(t)) < 0.5 + t * (e - 1) / (2 * (e + 1))
    return np.where(up, c, -c)


def piecewise(t: Floats, eps: float, rng: np.random.Generator) -> Floats:
    """PM: uniform on [l, r] w.p. e^(eps/2)/(e^(eps/2)+1), else uniform on [-C, l) u (r, C]."""
    e2 = np.exp(eps / 2)
    c = (e2 + 1) / (e2 - 1)
    left = (c + 1) / 2 * t - (c - 1) / 2
    right = left + c - 1
    inside = rng.random(len(t)) < e2 / (e2 + 1)
    centre = left + rng.random(len(t)) * (c - 1)
    u = rng.random(len(t)) * (c + 1)  # the two outer pieces have total length C + 1
    outer = np.where(u < left + c, -c + u, right + (u - (left + c)))
    return np.where(inside, centre, outer)


def hybrid(t: Floats, eps: float, rng: np.random.Generator) -> Floats:
    """HM: PM w.p. alpha = 1 - e^(-eps/2) for eps > 0.61, Duchi otherwise."""
    alpha = 1 - np.exp(-eps / 2) if eps > 0.61 else 0.0
    use_pm = rng.random(len(t)) < alpha
    return np.where(use_pm, piecewise(t, eps, rng), duchi(t, eps, rng))


def laplace(t: Floats, eps: float, rng: np.random.Generator) -> Floats:
    return t + rng.laplace(0.0, 2.0 / eps, len(t))  # sensitivity 2 on [-1, 1]


MEAN_ANCHORS = {"Duchi": duchi, "PM": piecewise, "HM": hybrid, "Laplace (numpy)": laplace}
BEST_OF = ("Duchi", "PM", "HM")


def report_variance(name: str, t: Floats, eps: float) -> Floats:
    """``Var[y | t]`` of one report, exact (Duchi 2018; Wang et al. 2019, Lemmas 1 and 4)."""
    e, a = np.exp(eps), np.exp(eps / 2)
    duchi_var = ((e + 1) / (e - 1)) ** 2 - t**2
    pm_var = t**2 / (a - 1) + (a + 3) / (3 * (a - 1) ** 2)
    if name == "Duchi":
        return duchi_var
    if name == "PM":
        return pm_var
    alpha = 1 - 1 / a if eps > 0.61 else 0.0
    return alpha * pm_var + (1 - alpha) * duchi_var

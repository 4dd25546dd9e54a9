"""The noise of an aggregate's cells: keyed to (release, window, data, cell), or fresh.

``KeyedCells`` (replay-stable): the words of cell ``c`` of window ``w`` under
the release id ``r`` (a hash of the aggregate's parameters and the part,
``AggregatePlan.release_id``) over exact totals of digest ``D``
(``Partial.digest``) are ``KeyedSource`` words, AES-256 under
``HMAC-SHA256(K_r, r || D)`` of the seed ``HMAC-SHA256(K_c, w, c)[:16]``,
where ``K_r`` and ``K_c`` are HKDF keys of the noise secret for the purposes
``aggregate`` and ``aggregate-cell`` with the topic and noise domain. The same
(secret, topic, domain, release, window, totals, cell) give the same words
bit for bit, so a replay releases the same bytes (no second release); any
other release, window, cell *or totals* gets independent words, so two
releases of one window over different data never share noise (their
difference would be the exact difference of the totals), and record fields
(whose keys have other purposes) never share it either.

``FreshCells`` (file mode, no key): ``KernelSeededAes``, new words every call;
a second run is a second release. Proof: docs/proofs/aggregates.md.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from privstream.mechanisms.rng import KeyedSource, NoiseSource, derive_key
from privstream.pipeline.noise import KernelSeededAes


class CellNoise(Protocol):
    def source(
        self, release_id: bytes, window: str, data: bytes, cells: Sequence[bytes]
    ) -> NoiseSource:
        """Words for one noisy total of ``window`` over totals of digest ``data``: row ``i``
        for ``cells[i]``."""
        ...


class FreshCells:
    """Fresh kernel-seeded words for every call (file mode)."""

    def __init__(self) -> None:
        self._source = KernelSeededAes()

    def source(
        self, release_id: bytes, window: str, data: bytes, cells: Sequence[bytes]
    ) -> NoiseSource:
        return self._source


def _prefixed(part: bytes) -> bytes:
    return len(part).to_bytes(8, "little") + part


class KeyedCells:
    """Replay-stable words per (release, window, cell) under keys of the noise secret."""

    def __init__(self, secret: bytes, topic: str, domain: str = "") -> None:
        context = (topic.encode(), domain.encode())
        self._release_root = derive_key(secret, "aggregate", *context)
        self._cell_key = derive_key(secret, "aggregate-cell", *context)

    def source(
        self, release_id: bytes, window: str, data: bytes, cells: Sequence[bytes]
    ) -> NoiseSource:
        key = hmac.new(self._release_root, release_id + data, hashlib.sha256).digest()
        prefix = _prefixed(window.encode())
        seeds = b"".join(
            hmac.new(self._cell_key, prefix + _prefixed(cell), hashlib.sha256).digest()[:16]
            for cell in cells
        )
        return KeyedSource(key, np.frombuffer(seeds, dtype=np.uint8).reshape(len(cells), 16))

    def __repr__(self) -> str:
        return "KeyedCells(keys=<derived, hidden>)"

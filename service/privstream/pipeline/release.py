"""Apply each field's mechanism to its parsed column, with the noise source it is owed.

The one step where noise enters a release: ``release_columns`` hands every
column to its handler's ``release`` with the source the ``NoiseProvider``
gives its field (keyed by the field's release id, or by each row's memo
token for memoized fields: ``memo_source``), and records what the metrics may
see (clamped counts, never the error: the released value is public).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from privstream.mechanisms import NoiseSource
from privstream.mechanisms.rng import SplicedSource
from privstream.pipeline.handlers import Column
from privstream.pipeline.noise import NoiseProvider
from privstream.pipeline.plan import MemoPlan, RecordPlan
from privstream.pipeline.results import Observation


def memo_source(provider: NoiseProvider, memo: MemoPlan, tokens: Sequence[bytes]) -> NoiseSource:
    """A memoized column's words: identity-only words first (a hash seed), then value words."""
    words = provider.for_memo(memo.scope, tokens)
    if not memo.identity_words:
        return words
    seeds = provider.for_memo(memo.seed_scope, [memo.identity_of(t) for t in tokens])
    return SplicedSource(seeds, memo.identity_words, words)


def release_columns(
    plan: RecordPlan,
    provider: NoiseProvider,
    good: NDArray[np.int64],
    columns: Sequence[Sequence[Any]],
    tokens: Sequence[Sequence[bytes]],
    observations: dict[str, Observation],
) -> list[Column]:
    """Each parsed column through its handler's mechanism; records the observations.

    ``good`` holds the input positions of the rows, ``tokens[j]`` the memo token of
    every row of column ``j`` (read only where the field is memoized).
    """
    released: list[Column] = []
    for j, planned in enumerate(plan.fields):
        handler, memo = planned.handler, planned.memo
        if memo is None:
            source = provider.for_column(planned.release_id, good)
        else:  # memoized: each row's words are a function of its (identity, true value)
            source = memo_source(provider, memo, tokens[j])
        column = handler.release(columns[j], source)
        released.append(column)
        if handler.mechanism is not None:  # never the error: y is public (canary.py)
            observations[handler.name] = Observation(column.clamped)
    return released

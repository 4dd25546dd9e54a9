"""The aggregates whose contributions the record path's ledger decides, and each record's
time for them (docs/proofs/ledger-aggregates.md, step 7).

Wired for Kafka timestamps only: a record is placed in a ledger window and in each
aggregate's window by its Kafka timestamp, which the aggregate stream reads as the record
path does. ``privacy.ledger.time`` (the released time, which the aggregate stream never
sees) and an aggregate's ``window.time`` are refused beside a ledger
(``config.aggregates.stream_problems``), and here again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from privstream.aggregates import build_aggregates
from privstream.errors import MisuseError
from privstream.ledger.aggregate_charges import AggregateCost

if TYPE_CHECKING:
    from privstream.config import AppConfig


def aggregate_costs_of(config: AppConfig) -> tuple[AggregateCost, ...]:
    """Each aggregate's cost under its plan's ``partial_id`` (config order); none without
    aggregates."""
    if not config.aggregates:
        return ()
    ledger = config.privacy.ledger
    timed = [s.name for s in config.aggregates if s.window is not None and s.window.time]
    if (ledger is not None and ledger.time is not None) or timed:
        raise MisuseError(
            "the ledger decides aggregate contributions by Kafka timestamps only; "
            f"privacy.ledger.time is {None if ledger is None else ledger.time!r} and "
            f"window.time is set for {timed}: stream_problems refuses this config"
        )
    return tuple(AggregateCost.of(plan.spec, plan.partial_id) for plan in build_aggregates(config))


def aggregate_times(timestamps_ms: npt.ArrayLike, aggregates: int) -> npt.NDArray[np.int64] | None:
    """Each record's time per aggregate (records x aggregates): its Kafka timestamp, the
    ledger's time too; None without aggregates."""
    if not aggregates:
        return None
    column = np.asarray(timestamps_ms, dtype=np.int64).reshape(-1, 1)
    return np.repeat(column, aggregates, axis=1)

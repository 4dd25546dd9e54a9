"""Noisy aggregates in the central model: counts, histograms, sums and means per window.

Pure (no Kafka): the sensitivities (``sensitivity``), the integer noise and
what it guarantees (``totals``, ``queries``), mergeable partial sums per
(aggregate, window, cell) (``partial``), the release of a partial as rows
(``release``), and the noise sources keyed to (release, window, cell)
(``noise``). ``plan`` builds them from the config. Proof, step by step:
docs/proofs/aggregates.md.
"""

from privstream.aggregates.noise import CellNoise, FreshCells, KeyedCells
from privstream.aggregates.partial import Accumulator, Partial, merge
from privstream.aggregates.plan import AggregatePlan, build_aggregates, record_problems
from privstream.aggregates.release import release

__all__ = [
    "Accumulator",
    "AggregatePlan",
    "CellNoise",
    "FreshCells",
    "KeyedCells",
    "Partial",
    "build_aggregates",
    "merge",
    "record_problems",
    "release",
]

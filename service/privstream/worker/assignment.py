"""What the consume loop and the rebalance listener share: the partitions this worker owns.

The loop (``privstream.worker.loop``) reads it before every batch and the
listener (``privstream.worker.rebalance``) changes it when partitions move;
neither reaches into the other. Partitions move only between batches: the
listener takes ``batch_lock`` before a revoke, and every revoke or
assignment bumps ``generation``, so a batch fetched before one is never
released.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from privstream.worker.generation_fence import Member


@dataclass
class Assignment:
    """The input partitions this worker owns now, and what its commits must name."""

    #: held while a batch is committed; a revoke waits for it
    batch_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    assigned: set[TopicPartition] = field(default_factory=set)
    #: bumped by every revoke and assignment: a batch fetched before one is dropped
    generation: int = 0
    #: the group member and generation of the current assignment (what commits it)
    member: Member | None = None

    def revoke(self, revoked: set[TopicPartition]) -> None:
        """Give up ``revoked`` (under ``batch_lock``)."""
        self.assigned.difference_update(revoked)
        self.generation += 1

    def assign(self, assigned: set[TopicPartition], member: Member | None) -> None:
        """Own exactly ``assigned`` now, committing as ``member``."""
        self.assigned = set(assigned)
        self.generation += 1
        self.member = member

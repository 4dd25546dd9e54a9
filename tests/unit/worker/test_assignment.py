"""The partitions the loop and the rebalance listener share (``worker/assignment.py``)."""

from __future__ import annotations

from aiokafka import TopicPartition
from privstream.worker.assignment import Assignment
from privstream.worker.generation_fence import Member

A, B = TopicPartition("raw", 0), TopicPartition("raw", 1)


def test_every_move_bumps_the_generation_so_an_earlier_batch_is_void() -> None:
    owned = Assignment()
    owned.assign({A, B}, Member(4, "m"))
    fetched_under = owned.generation
    owned.revoke({B})
    assert owned.assigned == {A}
    assert owned.generation != fetched_under  # the loop drops a batch fetched before
    owned.assign({B}, Member(5, "m"))
    assert owned.assigned == {B}  # exactly what the group assigned, nothing kept
    assert owned.member == Member(5, "m")  # the generation the next commit names


def test_a_revoke_of_partitions_not_owned_still_voids_a_fetched_batch() -> None:
    owned = Assignment()
    before = owned.generation
    owned.revoke({A})
    assert owned.assigned == set() and owned.generation == before + 1

"""Which deployment owns the aggregates' internal topic: its marker, and the refusal.

The internal topic is named after the input topic only, so two deployments
(two ``kafka.group_id``) over one input would share it: each would close and
release every window from its own view, with its own noise, and a window's
records would be released twice. As the ledger's changelog does (record
``D``, ``privstream.ledger.replay``), each deployment writes its marker
``{"t":"deployment","g":G}`` into the topic with its first transaction, and a
session that reads another group's marker is refused (``ChangelogError``,
exit 2) naming both. Retiring a deployment: docs/aggregates.md.

The topic also holds the input's partition count (``{"t":"partitions"}``),
written with the first transaction: a subject's home partition (``misplaced``)
depends on it, so after the input gains partitions a subject's records would
count on its old home under the old count and on its new one under the new
count. A session that finds another count is refused (``refuse_other_count``);
the input topic's growth retires the aggregates' state (docs/aggregates.md,
Adding partitions).
"""

from __future__ import annotations

from collections.abc import Mapping

from privstream.aggregates.windows import View, Write, deployment_record, partitions_record
from privstream.errors import ChangelogError


def refuse_shared(view: View, group: str, topic: str) -> None:
    """ChangelogError if another deployment's marker is in the topic."""
    others = sorted(view.deployments - {group})
    if others:
        raise ChangelogError(
            f"aggregates' internal topic {topic!r}: also used by deployment "
            f"(kafka.group_id) {', '.join(map(repr, others))}, while this one is {group!r}; "
            "two deployments over one input would each release every window, with "
            "independent noise. Run one deployment per input topic, or retire the other "
            "(docs/aggregates.md, Two deployments)"
        )


def marker_writes(view: View, group: str) -> list[Write]:
    """The marker to write with the next transaction, unless the topic holds it."""
    return [] if group in view.deployments else [deployment_record(group)]


def refuse_other_count(view: View, partitions: int, topic: str) -> None:
    """ChangelogError if the topic holds another input partition count than ``partitions``."""
    if view.partitions is not None and view.partitions != partitions:
        raise ChangelogError(
            f"aggregates' internal topic {topic!r}: its subjects' home partitions were "
            f"computed over {view.partitions} input partitions, and the input has "
            f"{partitions} now; a subject whose home moved would be counted on both, twice "
            "its bound. Let the open windows be released, then retire the aggregates' state "
            "and start them again (docs/aggregates.md, Adding partitions)"
        )


def refuse_recreated_input(
    view: View, ends: Mapping[int, int], input_topic: str, group: str
) -> None:
    """ChangelogError if an input partition's log ends before the read end its committed
    clock holds: the input was re-created (offsets never go back otherwise), and its new
    records below that end would be taken for a replay with no clock, left out while their
    offsets are committed (red team 14a, finding 6)."""
    for partition, end in sorted(ends.items()):
        clock = view.clocks.get(partition)
        if clock is not None and clock.read > end:
            raise ChangelogError(
                f"input topic {input_topic!r} partition {partition} ends at offset {end}, "
                f"before offset {clock.read}, where the aggregates had read it: the topic "
                "was deleted and re-created. Retire the aggregates' state (delete the topic "
                f"{input_topic}-privstream-aggregates and the group {group}) "
                "and set a new kafka.noise_domain (docs/aggregates.md, Adding partitions; "
                "docs/operations.md)"
            )


def count_writes(view: View, partitions: int) -> list[Write]:
    """The partition count to write with the next transaction, unless the topic holds it."""
    return [] if view.partitions == partitions else [partitions_record(partitions)]

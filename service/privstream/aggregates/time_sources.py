"""Which time source each aggregate counts under, and the refusal to change it.

A record's instant depends on the time source (its Kafka timestamp, or a
``window.time`` field read with its ``epoch_unit`` and ``assume_utc``):
under another source the same record falls in another window. What keeps a
record from being released twice across names and restarts compares
instants (``View.foreign_end``, a name's own ``released`` end, a new name's
start: docs/proofs/aggregates.md, step 16), so it holds only between names
of one source. The internal topic records each (aggregate, source) pair
before the aggregate releases under it (``time_record``, never tombstoned),
and a session is refused (``ChangelogError``, exit 2) if the topic holds,
under another source than one of its aggregates', that aggregate's name or
a name the config lacks (a rename). Changing the source: docs/aggregates.md,
"Changing the time source".
"""

from __future__ import annotations

from collections.abc import Sequence

from privstream.aggregates.event_time import describe
from privstream.aggregates.plan import AggregatePlan
from privstream.aggregates.windows import View, Write, time_record
from privstream.errors import ChangelogError


def refuse_other_time(view: View, plans: Sequence[AggregatePlan]) -> None:
    """ChangelogError if an aggregate's name, or a name the config lacks, was counted in
    the topic under another time source than the aggregate's."""
    names = {plan.name for plan in plans}
    for plan in plans:
        source = plan.time_source
        for name, other in sorted(view.times):
            if other != source and (name == plan.name or name not in names):
                raise ChangelogError(_message(plan, name, other))


def _message(plan: AggregatePlan, name: str, other: str) -> str:
    lacked = f"aggregate {name!r}, which the config lacks,"
    which = "this aggregate" if name == plan.name else lacked
    return (
        f"aggregate {plan.name!r} counts records under {describe(plan.time_source)}, while "
        f"{which} counted them under {describe(other)} in the aggregates' internal topic; "
        "a record's window differs between the two sources, so a record released under "
        "one could be released again under the other. Keep the time source, or stop "
        "every replica and retire the aggregates' state before changing it "
        "(docs/aggregates.md, Changing the time source)"
    )


def time_writes(view: View, plans: Sequence[AggregatePlan]) -> list[Write]:
    """The time records of the config's aggregates the topic does not hold yet."""
    pairs = sorted({(plan.name, plan.time_source) for plan in plans} - view.times)
    return [time_record(name, source) for name, source in pairs]


def recorded(view: View, plan: AggregatePlan) -> bool:
    """Whether the topic holds the aggregate's time record (it releases nothing before)."""
    return (plan.name, plan.time_source) in view.times

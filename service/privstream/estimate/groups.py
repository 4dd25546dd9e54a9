"""``estimate --by FIELD``: the estimates per value of a released field, beside the overall ones.

Each record goes to the overall aggregate and to the aggregate of its
group, keyed by the value the record *releases* for the split field. A
public field's value is the true one, so each group's estimates describe
the records holding that value, with their usual intervals. A noised split
field's value is not: records move between groups at the mechanism's
rates, and each group's estimate mixes in the others (the report warns,
``NOISED_SPLIT``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from privstream.config.paths import split_path
from privstream.estimate.accumulators import MISSING, Options
from privstream.estimate.aggregate import StreamAggregate
from privstream.pipeline import RecordPlan
from privstream.pipeline.nesting import released

#: groups kept; records of further values are counted under ``other_groups``
MAX_GROUPS = 100
NOISED_SPLIT = (
    "--by {0}: {0} is noised ({1}), so records are grouped by their released, noisy value: "
    "a record whose true {0} is another value lands in another group, and each group's "
    "estimates mix in the others' records; split by a public field for estimates of a group"
)


def group_key(value: object) -> str | None:
    """The group of a released value (its JSON text); None for an array or object."""
    if value is MISSING:
        return "(absent)"
    if isinstance(value, list | dict):
        return None
    return json.dumps(value, ensure_ascii=False)


class GroupedAggregate(StreamAggregate):
    """The overall aggregate, and one per value of ``by`` (up to ``MAX_GROUPS``)."""

    def __init__(
        self, plan: RecordPlan, options: Options, only: Iterable[str] | None, by: str
    ) -> None:
        self.only = list(only) if only is not None else None
        super().__init__(plan, options, self.only)
        self.by = by
        self.keys = split_path(by)
        self.groups: dict[str, StreamAggregate] = {}
        self.ungrouped: Counter[str] = Counter()

    def add_object(self, obj: dict[str, Any], refused: frozenset[str] = frozenset()) -> None:
        super().add_object(obj, refused)
        key = group_key(released(obj, self.keys, MISSING))
        if key is None:
            self.ungrouped["not_a_value"] += 1
            return
        group = self.groups.get(key)
        if group is None:
            if len(self.groups) >= MAX_GROUPS:
                self.ungrouped["other_groups"] += 1
                return
            group = self.groups[key] = StreamAggregate(self.plan, self.options, self.only)
        group.add_object(obj, refused)

    def flush(self) -> None:
        super().flush()
        for group in self.groups.values():
            group.flush()

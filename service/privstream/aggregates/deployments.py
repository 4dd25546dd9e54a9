"""Which deployment owns the aggregates' internal topic: its marker, and the refusal.

The internal topic is named after the input topic only, so two deployments
(two ``kafka.group_id``) over one input would share it: each would close and
release every window from its own view, with its own noise, and a window's
records would be released twice. As the ledger's changelog does (record
``D``, ``privstream.ledger.replay``), each deployment writes its marker
``{"t":"deployment","g":G}`` into the topic with its first transaction, and a
session that reads another group's marker is refused (``ChangelogError``,
exit 2) naming both. Retiring a deployment: docs/aggregates.md.
"""

from __future__ import annotations

from privstream.aggregates.windows import View, Write, deployment_record
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

"""How many records the per-subject ledger suppressed, for ``privstream estimate``.

The ledger's cumulative counts (``released`` and one count per reason,
``privstream.ledger.REASONS``) reach the analyst two ways: the
``privstream-ledger-counts`` header of the sanitized messages (the last one
per input partition holds that partition's totals) and the ``ledger`` entry
of a file's release metadata. Suppression truncates heavy senders: the
estimates describe the admitted records, not every event (docs/ledger.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

COUNTS_HEADER = "privstream-ledger-counts"


def parse_counts(value: object) -> dict[str, int] | None:
    """The counts of a ``privstream-ledger-counts`` header value (None if malformed)."""
    try:
        data = json.loads(bytes(value))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    counts = {k: v for k, v in data.items() if isinstance(v, int) and not isinstance(v, bool)}
    return counts if "released" in counts else None


def summary(per_partition: Iterable[Mapping[str, int]]) -> dict[str, Any] | None:
    """Totals over partitions: released, suppressed by reason, and the suppression rate."""
    totals: dict[str, int] = {}
    seen = False
    for counts in per_partition:
        seen = True
        for name, number in counts.items():
            if name != "partition":
                totals[name] = totals.get(name, 0) + number
    if not seen:
        return None
    released = totals.pop("released", 0)
    reasons = {name: number for name, number in sorted(totals.items()) if number}
    suppressed = sum(reasons.values())
    seen_records = released + suppressed
    return {
        "released": released,
        "suppressed": suppressed,
        "suppression_rate": suppressed / seen_records if seen_records else 0.0,
        "reasons": reasons,
    }


def render(ledger: dict[str, Any] | None) -> str | None:
    """One line for the table output (None without a ledger)."""
    if ledger is None:
        return None
    reasons = ", ".join(f"{name} {number:,}" for name, number in ledger["reasons"].items())
    return (
        f"ledger: {ledger['suppressed']:,} of {ledger['released'] + ledger['suppressed']:,} "
        f"records suppressed ({ledger['suppression_rate']:.2%}{': ' + reasons if reasons else ''}"
        "); the estimates describe the admitted records: subjects over their cap are truncated"
    )

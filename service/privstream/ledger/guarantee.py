"""The per-subject guarantee as ``explain`` states it (proof: docs/ledger.md).

With at most ``m = records_per_window`` records of a subject released per
window, each ``(eps_r, delta_r)``-DP, basic (sequential) composition gives
``(m eps_r, m delta_r)`` for that subject's released records of the window,
which the integer accounting keeps within the caps ``(eps_W, delta_W)``.
Over the lifetime, at most ``M = records_per_lifetime`` records are released,
so ``(M eps_r, M delta_r)`` with ``M eps_r <= lifetime_epsilon``. With aggregates, each
window a subject's records enter is charged beside them and the caps bound the sum
(docs/proofs/ledger-aggregates.md); ``explain`` prints each window's charge.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from privstream.config.ledger import format_duration
from privstream.ledger.aggregate_charges import aggregate_costs
from privstream.ledger.policy import LedgerPolicy

if TYPE_CHECKING:
    from privstream.config import AppConfig
    from privstream.pipeline import RecordPlan

STATEMENT = (
    "for any subject s and any UTC window W, the records of s with timestamps in W that are "
    "released are ({eps:g}, {delta:g})-DP in aggregate (sequential composition over one "
    "subject's window, parallel composition across subjects and across disjoint windows)"
)


def ledger_guarantee(config: AppConfig, plan: RecordPlan) -> dict[str, Any] | None:
    """The user-level guarantee per window and lifetime, or None without a ledger."""
    ledger = config.privacy.ledger
    if ledger is None:
        return None
    policy = LedgerPolicy.from_config(config, plan)
    per_window = policy.records_per_window
    lifetime = policy.records_per_lifetime
    return {
        "subject": config.privacy.subject,
        "subject_public": config.privacy.subject_public,
        "window": format_duration(policy.window_ms),
        "time": ledger.time,
        "grace": format_duration(policy.grace_ms),
        "max_future": format_duration(policy.max_future_ms),
        "over_budget": policy.over_budget,
        "record_epsilon": policy.record_epsilon,
        "record_delta": policy.record_delta,
        "window_epsilon": policy.epsilon,
        "window_delta": policy.delta,
        "records_per_window": per_window,
        "spent_per_window": [per_window * policy.record_epsilon, per_window * policy.record_delta],
        "lifetime_epsilon": policy.lifetime_epsilon,
        "records_per_lifetime": lifetime,
        "lifetime_delta": None if lifetime is None else lifetime * policy.record_delta,
        "statement": STATEMENT.format(eps=policy.epsilon, delta=policy.delta),
        "memoized": [f.name for f in plan.fields if f.memo is not None],
        "header": policy.guarantee_header().decode(),
        "aggregates": _aggregate_charges(config, policy),
    }


def _aggregate_charges(config: AppConfig, policy: LedgerPolicy) -> dict[str, Any] | None:
    """What each aggregate's windows cost a subject per ledger window, and all of them
    together before the cap (docs/proofs/ledger-aggregates.md), or None without any."""
    if not config.aggregates or any(spec.window is None for spec in config.aggregates):
        return None
    costs = aggregate_costs(config)
    counts = [cost.windows_per(policy.window_ms) for cost in costs]
    entries = [
        {
            "name": cost.name,
            "window": format_duration(cost.window_ms),
            "epsilon": cost.epsilon,
            "delta": cost.delta,
            "windows_per_ledger_window": count,
        }
        for cost, count in zip(costs, counts, strict=True)
    ]
    return {
        "entries": entries,
        "most_epsilon": math.fsum(c.epsilon * n for c, n in zip(costs, counts, strict=True)),
        "most_delta": math.fsum(c.delta * n for c, n in zip(costs, counts, strict=True)),
    }


def ledger_lines(data: dict[str, Any] | None) -> list[str]:
    """The ``explain`` table's notes on the per-subject guarantee."""
    if data is None:
        return [
            "per subject: no ledger (privacy.ledger): a subject sending n records gets n "
            "times the per-record guarantee"
        ]
    lines = [
        f"per subject {data['subject']!r} per {data['window']} UTC window (ledger): "
        f"epsilon={data['window_epsilon']:g} delta={data['window_delta']:g}; at most "
        f"{data['records_per_window']} records released per subject and window, the rest "
        f"suppressed ({data['over_budget']}); {data['statement']}",
    ]
    if data["lifetime_epsilon"] is None:
        lines.append("per subject over its lifetime: no cap; the guarantee adds up over windows")
    else:
        lines.append(
            f"per subject over its lifetime: epsilon={data['lifetime_epsilon']:g} "
            f"delta={data['lifetime_delta']:g} (at most {data['records_per_lifetime']} records, "
            "sequential composition over windows)"
        )
    if data["memoized"]:
        lines.append(
            f"ledger and memoized fields ({', '.join(data['memoized'])}): a memoized answer "
            "repeats in every window where the value repeats, so the per-window guarantee "
            "covers their values, not whether they changed between windows"
        )
    lines.extend(_aggregate_lines(data))
    stamp = "Kafka timestamp" if data["time"] is None else f"time {data['time']!r}"
    if data["time"] is not None:
        lines.append(
            f"ledger windows: from the released time of field {data['time']!r} "
            "(privacy.ledger.time: a public time, as the output shows it), not the Kafka "
            "timestamp; a record without one is dead-lettered"
        )
    lines.append(
        f"ledger: the subject is the Kafka message key (records whose {data['subject']!r} "
        f"differs are dead-lettered); late records accepted until window end + {data['grace']},"
        f" records whose {stamp} is more than {data['max_future']} ahead suppressed; "
        "memoized repeats are charged in full"
    )
    return lines


def _aggregate_lines(data: dict[str, Any]) -> list[str]:
    """The aggregates' charges per ledger window, and the per-subject total."""
    charges = data.get("aggregates")
    if charges is None:
        return []
    parts = [
        f"{e['name']} (per {e['window']} window entered: epsilon={e['epsilon']:g} "
        f"delta={e['delta']:g}, up to {e['windows_per_ledger_window']} windows)"
        for e in charges["entries"]
    ]
    return [
        f"ledger and aggregates: a subject is charged per aggregate window it enters, "
        f"in each {data['window']} ledger window its records there fall in, beside its "
        f"records: {'; '.join(parts)}; every window entered would cost "
        f"epsilon={charges['most_epsilon']:g} delta={charges['most_delta']:g}; per subject "
        f"and ledger window, records and aggregates together: at most "
        f"epsilon={data['window_epsilon']:g} delta={data['window_delta']:g} (the cap: a "
        "window that does not fit leaves the subject's records out of it, "
        "docs/proofs/ledger-aggregates.md)"
    ]

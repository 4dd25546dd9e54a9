"""Why the ledger suppressed a record: the dead-letter detail of each reason.

No detail quotes a raw value; each names the setting or the producer's fix.
"""

from __future__ import annotations

from collections.abc import Mapping

from privstream.config.ledger import format_duration
from privstream.ledger import LedgerPolicy
from privstream.ledger.policy import MAX_SUBJECT_BYTES

#: always dead-lettered: the operator must fix the keying; the other reasons follow
#: ``over_budget`` (dropped and counted, or dead-lettered)
ALWAYS_DEAD_LETTERED = frozenset(
    {"subject_partition_mismatch", "subject_key_mismatch", "subject_too_long", "no_subject"}
)


def reason_details(
    policy: LedgerPolicy, subject: str, time_field: str | None = None
) -> Mapping[str, str]:
    """The dead-letter detail of each suppression reason (no raw value in any);
    ``time_field``: ``privacy.ledger.time``, whose released time gives the windows."""
    window = format_duration(policy.window_ms)
    stamp = "Kafka timestamp" if time_field is None else f"time {time_field!r}"
    clock = "the producer's clock" if time_field is None else "the event times"
    cost = f"each released record costs epsilon {policy.record_epsilon:g}"
    return {
        "budget_exhausted": (
            f"the subject already spent its {window} window's cap (privacy.ledger.epsilon "
            f"{policy.epsilon:g}, delta {policy.delta:g}; {cost}): not released. Its next "
            "window opens a new budget; raise the caps to release more per subject"
        ),
        "lifetime_exhausted": (
            f"the subject already spent privacy.ledger.lifetime_epsilon "
            f"{policy.lifetime_epsilon:g} ({cost}): not released, now or later"
            if policy.lifetime_epsilon is not None
            else "lifetime cap reached"
        ),
        "late_record": (
            f"the record's {stamp} is older than its {window} window's end plus "
            f"privacy.ledger.grace {format_duration(policy.grace_ms)}, or its window starts "
            "before one already closed (after a change of window or grace): that window "
            f"cannot be charged again. Fix {clock} or raise grace"
        ),
        "future_record": (
            f"the record's {stamp} is more than privacy.ledger.max_future "
            f"{format_duration(policy.max_future_ms)} ahead of the worker's clock: fix "
            f"{clock} or raise max_future"
        ),
        "subject_partition_mismatch": (
            "the record is not on the partition Kafka's default partitioner (murmur2) gives "
            "its key: produce with the default partitioner (librdkafka clients: "
            "partitioner=murmur2_random), so that one partition holds each subject's ledger"
        ),
        "subject_key_mismatch": (
            f"the message key is not the value of the subject field {subject!r}: key the "
            "raw topic by the subject, so that one partition (one replica) holds each "
            "subject's ledger"
        ),
        "subject_too_long": (
            f"the subject field {subject!r} holds more than {MAX_SUBJECT_BYTES} bytes: the "
            "ledger keeps every subject whole in its changelog and does not charge one that "
            "long, so it is not released; send shorter ids (a hash of a long one)"
        ),
        "no_subject": (
            f"the subject field {subject!r} is missing or null: a record without a subject "
            "cannot be charged, so it is not released"
        ),
    }

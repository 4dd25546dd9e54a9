"""Which input records the aggregates leave out for their partition: the ledger's rule.

Contribution bounds hold per input partition (``OpenWindows``), so a subject's
records must all reach one: the partition Kafka's default partitioner gives its
subject's canonical bytes (``pipeline.subjects``, the key the ledger trusts),
checked by the ledger's own ``misplaced``. A record elsewhere (a null key sent
round-robin, a key other than the subject, a producer choosing the partition)
would be bounded a second time on its partition: it is left out. The rule
reads only the record itself and the partition count.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokafka import ConsumerRecord

from privstream.pipeline.subjects import subject_column
from privstream.worker.ledger_columns import misplaced


def misplaced_records(
    messages: Sequence[ConsumerRecord], partition: int, partitions: int, subject: str | None
) -> list[bool]:
    """Per message of one partition's batch: its subject's records belong elsewhere.

    Without ``privacy.subject`` the unit is a record and any partition holds it whole.
    """
    if subject is None or not messages:
        return [False] * len(messages)
    subjects = subject_column([m.value or b"" for m in messages], subject)
    return list(misplaced(partition, subjects, partitions).tolist())

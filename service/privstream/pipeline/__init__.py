"""The columnar batch transform: pure, no Kafka. Plans are built by ``privstream.kinds``."""

from privstream.pipeline.batch import process_batch
from privstream.pipeline.plan import RecordPlan
from privstream.pipeline.results import BatchResult, DeadLetter

__all__ = ["BatchResult", "DeadLetter", "RecordPlan", "process_batch"]

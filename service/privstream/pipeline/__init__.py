"""The columnar batch transform: pure, no Kafka."""

from privstream.pipeline.batch import process_batch
from privstream.pipeline.plan import RecordPlan, build_plan
from privstream.pipeline.results import BatchResult, DeadLetter

__all__ = ["BatchResult", "DeadLetter", "RecordPlan", "build_plan", "process_batch"]

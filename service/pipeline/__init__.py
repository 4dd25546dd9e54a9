"""The columnar batch transform: pure, no Kafka."""

from service.pipeline.batch import BatchResult, DeadLetter, process_batch
from service.pipeline.plan import RecordPlan, build_plan

__all__ = ["BatchResult", "DeadLetter", "RecordPlan", "build_plan", "process_batch"]

"""The columnar batch transform: pure, no Kafka."""

from service.pipeline.batch import process_batch
from service.pipeline.plan import RecordPlan, build_plan
from service.pipeline.results import BatchResult, DeadLetter

__all__ = ["BatchResult", "DeadLetter", "RecordPlan", "build_plan", "process_batch"]

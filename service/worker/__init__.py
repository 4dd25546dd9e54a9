"""The Kafka shell around the pure pipeline, and its HTTP endpoints."""

from service.worker.http import Health, HttpEndpoint
from service.worker.loop import Worker

__all__ = ["Health", "HttpEndpoint", "Worker"]

"""The Kafka shell around the pure pipeline, and its HTTP endpoints."""

from privstream.worker.http import Health, HttpEndpoint
from privstream.worker.loop import Worker

__all__ = ["Health", "HttpEndpoint", "Worker"]

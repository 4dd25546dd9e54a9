"""``privstream run``: the long-running Kafka worker with its HTTP endpoints."""

from __future__ import annotations

import asyncio
import logging
import signal

from prometheus_client import CollectorRegistry

from service.config import AppConfig
from service.mechanisms import OsEntropy
from service.metrics import Metrics
from service.pipeline import RecordPlan
from service.worker import Health, HttpEndpoint, Worker

log = logging.getLogger("privstream.run")


async def serve(config: AppConfig, plan: RecordPlan, http_port: int | None = None) -> None:
    """Run until SIGTERM/SIGINT; the batch in flight is produced and committed first."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.describe_plan(plan)
    health = Health()
    port = config.http.port if http_port is None else http_port
    endpoint = HttpEndpoint(registry, health, config.http.host, port)
    await endpoint.start()
    log.info("metrics and health on %s:%d", config.http.host, endpoint.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    worker = Worker(config.kafka, plan, source=OsEntropy(), metrics=metrics, health=health)
    try:
        await worker.run(stop)
    finally:
        await endpoint.stop()
    log.info("stopped cleanly")

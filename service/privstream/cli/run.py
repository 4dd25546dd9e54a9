"""``privstream run``: the long-running Kafka worker with its HTTP endpoints."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Coroutine
from typing import Any

from prometheus_client import CollectorRegistry

from privstream.config import AppConfig
from privstream.config.runtime import Runtime
from privstream.metrics import Metrics
from privstream.pipeline import RecordPlan
from privstream.worker import Health, HttpEndpoint, Worker
from privstream.worker.ledger_store import LedgerStore
from privstream.worker.output_schema import OutputSchema

log = logging.getLogger("privstream.run")


async def serve(
    config: AppConfig, plan: RecordPlan, runtime: Runtime, http_port: int | None = None
) -> None:
    """Run until SIGTERM/SIGINT; the batch in flight is committed first.

    A batch that cannot commit within ``kafka.drain_timeout_ms`` (broker gone)
    is abandoned: its transaction is aborted by the broker or by this
    replica's next start, and the batch is replayed with the same noise.
    """
    output = OutputSchema.of(config, plan)  # a field Avro cannot hold stops us here
    tune_collector()
    registry = CollectorRegistry()
    metrics = Metrics(registry, dead_letter_reasons=config.metrics.dead_letter_reasons)
    metrics.describe_plan(
        plan,
        canaries=config.metrics.canaries,
        canary_interval_s=config.metrics.canary_interval_seconds,
        clamped_counts=config.metrics.clamped_counts,
    )
    health = Health()
    port = config.http.port if http_port is None else http_port
    endpoint = HttpEndpoint(metrics, health, config.http.host, port)
    await endpoint.start()
    log.info("metrics and health on %s:%d", config.http.host, endpoint.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    kafka = config.needs_kafka("run")
    ledger = LedgerStore.from_config(config, plan, runtime, metrics)
    worker = Worker(
        kafka, plan, runtime, metrics=metrics, health=health, ledger=ledger, output=output
    )
    task = asyncio.create_task(_workers(worker.run(stop), config, runtime, metrics, stop))
    try:
        await _until_stopped(task, stop, kafka.drain_timeout_ms / 1000)
    finally:
        await endpoint.stop()
    log.info("stopped cleanly")


async def _workers(
    records: Coroutine[Any, Any, None],
    config: AppConfig,
    runtime: Runtime,
    metrics: Metrics,
    stop: asyncio.Event,
) -> None:
    """The record worker, and the aggregates' worker beside it when the config has any
    (its own group and transactions: docs/aggregates.md)."""
    if not config.aggregates:
        await records
        return
    from privstream.worker.aggregates import AggregateWorker

    aggregates = AggregateWorker(config, config.needs_kafka("run"), runtime, metrics)
    await asyncio.gather(records, aggregates.run(stop))


#: young objects between two collections of the youngest generation (CPython's default: 700)
GC_THRESHOLD = (50_000, 20, 100)


def tune_collector() -> None:
    """Fewer, cheaper garbage collections in the long-running worker.

    Every batch allocates tens of thousands of container objects (a record
    object per consumed record, tuples, the decoded dicts) that die with the
    batch; at CPython's default threshold a collection runs every 700 of
    them, and every tenth of those rescans what survived, including the
    modules, the plan and the ledger's tables. ``gc.freeze`` moves what
    start-up built into a generation the collector never scans again (it
    lives as long as the process anyway), and a threshold of 50,000 lets a
    batch's objects die by reference counting before a collection sees
    them. Cycles are still collected, later (a batch makes none: the
    worker's unit tests check). Measured in docs/benchmarks.md: the ledger's
    charge about twice as fast in process, the worker's CPU per record down
    by a sixth.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


async def _until_stopped(task: asyncio.Task[None], stop: asyncio.Event, drain_s: float) -> None:
    """Wait for the worker; after ``stop``, give its batch in flight ``drain_s`` seconds."""
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not task.done():
        log.info("stopping: finishing the batch in flight (up to %.0f s)", drain_s)
        done, _ = await asyncio.wait({task}, timeout=drain_s)
        if not done:
            log.warning("batch in flight not committed after %.0f s; abandoning it", drain_s)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return
    task.result()  # a BrokerError surfaces here

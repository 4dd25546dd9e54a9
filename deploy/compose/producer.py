"""Synthetic device telemetry for the compose demo, at a steady rate, forever.

Runs in the privstream image (which has aiokafka) as the `producer` service of
docker-compose.yml. The records have the shape deploy/compose/config.yaml
sanitizes (the same as deploy/demo's): a fleet of devices, each record keyed
by its device id, plus a field the config does not list (`os_build`, which the
worker must drop) and, every MALFORMED_EVERY records, one record the worker
must dead-letter, so the dashboard's dead-letter panel has something to show.

Environment: BOOTSTRAP_SERVERS (kafka:9092), TOPIC (telemetry.raw), RATE
records/s (200), DEVICES fleet size (1000), MALFORMED_EVERY (1000; 0 = never).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import time
from collections.abc import Callable

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

log = logging.getLogger("producer")

#: NZ is outside the config's domain: the worker maps it to "other" (unknown_as)
COUNTRIES = ["US", "DE", "FR", "IN", "BR", "JP", "NZ"]
#: what a broken client might send: bad JSON, a missing field, a wrong type, bad UTF-8
MALFORMED = [
    b"{not json",
    b'{"device_id": "device-x", "ts": 1}',
    b'{"device_id": "device-x", "ts": 1, "seq": 1, "battery_temp_c": "hot",'
    b' "session_minutes": 1.0, "country": "US", "crashed": false}',
    b"\xff\xfe",
]
TICK_S = 0.1
#: after an outage, catch up at most this many seconds of backlog, then drop it
MAX_BACKLOG_S = 5.0


def telemetry(seq: int, devices: int, rnd: secrets.SystemRandom) -> dict[str, object]:
    """One telemetry record; `seq` numbers the records of this producer."""
    return {
        "device_id": f"device-{rnd.randrange(devices):06d}",
        "ts": int(time.time() * 1000),
        "seq": seq,
        "battery_temp_c": round(rnd.gauss(31.0, 6.0), 1),
        "session_minutes": round(rnd.expovariate(1 / 25), 1),
        "country": rnd.choice(COUNTRIES),
        "crashed": rnd.random() < 0.05,
        "os_build": "internal-build-7731",  # not in the config: the worker drops it
    }


def messages(
    devices: int, malformed_every: int, rnd: secrets.SystemRandom
) -> Callable[[int], tuple[bytes | None, bytes]]:
    """seq -> (key, value) of the seq-th message."""

    def message(seq: int) -> tuple[bytes | None, bytes]:
        if malformed_every and seq % malformed_every == malformed_every - 1:
            return None, MALFORMED[(seq // malformed_every) % len(MALFORMED)]
        record = telemetry(seq, devices, rnd)
        return str(record["device_id"]).encode(), json.dumps(record).encode()

    return message


async def connect(bootstrap: str, stop: asyncio.Event) -> AIOKafkaProducer | None:
    """A started producer, retrying while the broker is not there yet; None if stopped first."""
    delay = 0.5
    while not stop.is_set():
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, client_id="telemetry-producer", acks="all", linger_ms=20
        )
        try:
            await producer.start()
        except KafkaError as exc:
            await producer.stop()
            log.warning("broker not reachable (%s); retrying in %.1fs", exc, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(delay * 2, 10.0)
        else:
            return producer
    return None


async def produce(
    bootstrap: str,
    topic: str,
    rate: float,
    message: Callable[[int], tuple[bytes | None, bytes]],
    stop: asyncio.Event,
) -> int:
    """Send `rate` messages per second until `stop` is set; returns how many were sent."""
    producer = await connect(bootstrap, stop)
    if producer is None:
        return 0
    loop = asyncio.get_running_loop()
    started = last_report = loop.time()
    sent = 0
    try:
        while not stop.is_set():
            now = loop.time()
            due = int((now - started) * rate)
            if due - sent > rate * MAX_BACKLOG_S:  # fell behind (broker outage): skip ahead
                started += (due - sent - rate * MAX_BACKLOG_S) / rate
                due = int((now - started) * rate)
            pending = []
            for seq in range(sent, due):
                key, value = message(seq)
                pending.append(await producer.send(topic, value, key=key))
            results = await asyncio.gather(*pending, return_exceptions=True)
            failed = sum(isinstance(r, BaseException) for r in results)
            if failed:
                log.warning("%d of %d messages not delivered", failed, len(results))
            sent = due
            if now - last_report >= 10.0:
                log.info("sent %d messages to %s (%.0f/s target)", sent, topic, rate)
                last_report = now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_S)
    finally:
        await producer.stop()
    return sent


async def main() -> int:
    bootstrap = os.environ.get("BOOTSTRAP_SERVERS", "kafka:9092")
    topic = os.environ.get("TOPIC", "telemetry.raw")
    rate = float(os.environ.get("RATE", "200"))
    devices = int(os.environ.get("DEVICES", "1000"))
    malformed_every = int(os.environ.get("MALFORMED_EVERY", "1000"))
    if not rate > 0 or devices < 1 or malformed_every < 0:
        log.error("RATE must be > 0, DEVICES >= 1 and MALFORMED_EVERY >= 0")
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # PID 1 in a container gets no default SIGTERM action: handle it, or `docker stop` hangs
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("producing to %s on %s at %.0f records/s", topic, bootstrap, rate)
    message = messages(devices, malformed_every, secrets.SystemRandom())
    sent = await produce(bootstrap, topic, rate, message, stop)
    log.info("stopped after %d messages", sent)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    raise SystemExit(asyncio.run(main()))

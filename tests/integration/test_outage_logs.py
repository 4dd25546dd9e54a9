"""A real broker outage in the worker's log: two WARNINGs, few Kafka client lines, JSON.

The worker reaches its own broker through a TCP proxy (``tcp_proxy``) that
resets every connection and refuses new ones for ``OUTAGE_S``: the fault
under which aiokafka used to log about 1,030 ERROR lines in 34 s. Run with
``--log-format json`` at INFO, the log must have: every line one JSON object
with the keys ts, level, logger, message; exactly one WARNING saying the
broker is unreachable and one saying it is back, with a duration of at least
the outage; the Kafka client's lines few (held during the outage,
rate-limited otherwise); no raw key, value or header anywhere.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker import LocalBroker, local_broker
from tests.support.faults import (
    Tail,
    fault_topics,
    free_port,
    is_bad,
    poll_until,
    seq_of,
    telemetry_message,
)
from tests.support.http_get import http_get
from tests.support.tcp_proxy import TcpProxy
from tests.support.worker_proc import (
    PRIVACY,
    WorkerProcess,
    produce,
    raw_in_log,
    started,
    write_config,
)

OUTAGE_S = 12.0
CHUNK = 400
#: the Kafka client's lines a whole run may show: each template at most once a minute
MAX_CLIENT_LINES = 25


@pytest.fixture
def proxied() -> Iterator[tuple[LocalBroker, int]]:
    """A broker of this test only whose worker listener advertises a proxy port."""
    proxy_port = free_port()
    with local_broker(advertised_port=proxy_port) as broker:
        yield broker, proxy_port


async def test_a_broker_outage_is_two_warnings_in_json_lines(
    proxied: tuple[LocalBroker, int], tmp_path: Path
) -> None:
    broker, proxy_port = proxied
    assert broker.external_port is not None
    direct = broker.bootstrap
    kafka = await fault_topics(direct, "outage-logs")
    port = free_port()
    body = {**PRIVACY, "http": {"host": "127.0.0.1", "port": port}}
    config = write_config(tmp_path / "c.yaml", f"127.0.0.1:{proxy_port}", kafka, body)
    worker = WorkerProcess(config, tmp_path / "worker.log", log_level="INFO")
    messages = [telemetry_message(i, "CANARY-LOGS") for i in range(2 * CHUNK)]

    def good(n: int) -> int:
        return sum(1 for i in range(n) if not is_bad(i))

    async def ready(status: int) -> bool:
        assert worker.alive, worker.log_text()[-3000:]
        try:
            code, _ = await http_get(port, "/readyz")
        except OSError:
            return False
        return code == status

    async with (
        TcpProxy(proxy_port, broker.external_port) as proxy,
        Tail(direct, kafka["output_topic"], identity=seq_of) as out,
        started(worker, "--log-format", "json"),
    ):
        await poll_until(lambda: ready(200), 60, "ready", why=worker.log_text)
        await produce(direct, kafka["input_topic"], messages[:CHUNK])
        await out.wait_distinct(good(CHUNK), within_s=60)
        proxy.cut(OUTAGE_S)
        await poll_until(lambda: ready(503), 10, "not ready in the outage", why=worker.log_text)

        async def back() -> bool:
            return "broker reachable again" in worker.log_text()

        await poll_until(back, OUTAGE_S + 60, "the broker back in the log", why=worker.log_text)
        await produce(direct, kafka["input_topic"], messages[CHUNK:])
        await out.wait_distinct(good(2 * CHUNK), within_s=60)
        assert await worker.terminate() == 0, worker.log_text()[-3000:]

    lines = [json.loads(line) for line in worker.log_text().splitlines()]  # each one JSON
    assert all(tuple(line) == ("ts", "level", "logger", "message") for line in lines), lines
    warnings = [line["message"] for line in lines if line["level"] == "WARNING"]
    down = [m for m in warnings if m.startswith("broker unreachable")]
    again = [m for m in warnings if m.startswith("broker reachable again")]
    assert len(down) == 1 and len(again) == 1, warnings
    took = re.match(r"broker reachable again after ([0-9.]+) s", again[0])
    # the readiness probe notices within its interval + timeout (3 s) of the cut
    assert took is not None and OUTAGE_S - 4 <= float(took.group(1)) <= OUTAGE_S + 60, again
    client = [line for line in lines if line["logger"].startswith("aiokafka")]
    by_level = Counter(line["level"] for line in lines)
    print(f"{len(lines)} lines {dict(by_level)}, {len(client)} of aiokafka; {again[0]}")
    assert len(client) <= MAX_CLIENT_LINES, [line["message"][:200] for line in client]
    assert not raw_in_log(worker.log_text())

"""A real Kafka broker for integration tests.

`kafka_broker()` yields a bootstrap servers string, taken from the first of:

1. ``KAFKA_BOOTSTRAP_SERVERS`` if set: used as is, nothing is started or stopped;
2. a testcontainers Kafka (KRaft) if a Docker engine answers;
3. the local launcher ``deploy/local-kafka/kafka.sh`` (Maven-resolved jars, no
   Docker) on a free port (or ``PRIVSTREAM_TEST_KAFKA_PORT``) with a work dir
   of its own, so it never clashes with a demo broker on 9092; the broker is
   stopped and its work dir deleted on exit.

``PRIVSTREAM_TEST_KAFKA_BACKEND=docker|local`` forces the choice between 2 and 3.
``create_topics()`` creates topics and waits until every partition has a leader
that serves requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError, for_code

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = REPO_ROOT / "deploy" / "local-kafka" / "kafka.sh"
# Confluent Platform 7.9.x ships Apache Kafka 3.9.x, the version kafka.sh runs.
DEFAULT_IMAGE = "confluentinc/cp-kafka:7.9.0"
START_TIMEOUT_S = 90.0
# first run may resolve the broker jars with Maven before starting
LAUNCHER_TIMEOUT_S = START_TIMEOUT_S + 600.0
STOP_TIMEOUT_S = 120.0


@contextlib.contextmanager
def kafka_broker() -> Iterator[str]:
    """Yield the bootstrap servers of a running single-node Kafka broker."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if bootstrap:
        log.info("using KAFKA_BOOTSTRAP_SERVERS=%s", bootstrap)
        yield bootstrap
        return
    backend = os.environ.get("PRIVSTREAM_TEST_KAFKA_BACKEND", "").strip().lower()
    if backend not in ("", "docker", "local"):
        raise ValueError(f"PRIVSTREAM_TEST_KAFKA_BACKEND={backend!r}: expected docker or local")
    if backend == "docker" or (backend == "" and docker_available()):
        with _docker_broker() as servers:
            yield servers
    else:
        with _local_broker() as servers:
            yield servers


def docker_available(timeout: float = 5.0) -> bool:
    """True if a Docker engine answers a ping (never hangs, never raises)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        answered = _docker_ping(timeout)
        # A failed ping leaves unclosed sockets behind (held by the traceback
        # until now): collect them here, where their ResourceWarning is ignored,
        # not in a later test run under `-W error`.
        gc.collect()
    return answered


def _docker_ping(timeout: float) -> bool:
    try:
        docker_sdk: Any = importlib.import_module("docker")
        importlib.import_module("testcontainers.community.kafka")
        client = docker_sdk.from_env(timeout=int(max(1.0, timeout)))
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception as exc:  # no SDK, no socket, engine down, ...
        # log text only: a log record must not keep the traceback alive
        log.debug("no usable Docker engine: %s", f"{type(exc).__name__}: {exc}")
        return False


@contextlib.contextmanager
def _docker_broker() -> Iterator[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from testcontainers.community.kafka import KafkaContainer

    image = os.environ.get("PRIVSTREAM_TEST_KAFKA_IMAGE", DEFAULT_IMAGE)
    container = (
        KafkaContainer(image)
        .with_kraft()
        .with_env("KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS", "4")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
        .with_env("KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS", "4")
        .with_env("KAFKA_MIN_INSYNC_REPLICAS", "1")
    )
    log.info("starting Kafka container %s", image)
    container.start(timeout=int(START_TIMEOUT_S))
    try:
        yield container.get_bootstrap_server()
    finally:
        container.stop()


def _free_ports() -> tuple[int, int]:
    """Two distinct free ports: client and controller."""
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as a,
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as b,
    ):
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        return int(a.getsockname()[1]), int(b.getsockname()[1])


def _run_launcher(
    command: str, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(LAUNCHER), command],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class LocalBroker:
    """A broker of the local launcher with a work dir of its own.

    ``start()`` and ``stop()`` may be called repeatedly: the data dir survives
    a stop, so a restarted broker keeps its topics, offsets and transaction
    state (the broker-restart test relies on this). ``close()`` stops it and
    deletes the work dir. ``extra_properties`` (server.properties lines, a key
    given again overrides the launcher's) and ``format_args`` (StorageTool
    format arguments such as ``--add-scram ...``) configure e.g. a SASL_SSL
    listener.

    ``advertised_port`` adds a second PLAINTEXT listener, ``EXTERNAL``, on a
    free port of its own (``external_port``) that advertises
    ``127.0.0.1:advertised_port`` instead, e.g. a TCP proxy forwarding to it:
    clients bootstrapping there reach every broker through the proxy, while
    ``bootstrap`` (the inter-broker listener, which transaction markers use)
    bypasses it.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        extra_properties: str = "",
        format_args: str = "",
        advertised_port: int | None = None,
    ) -> None:
        if port is None:
            port, controller_port = _free_ports()
        else:
            controller_port = port + 1
        self.port = port
        self.external_port: int | None = None
        if advertised_port is not None:
            self.external_port = _free_ports()[0]
            extra_properties = (
                _external_listener(port, controller_port, self.external_port, advertised_port)
                + extra_properties
            )
        self.work_dir = tempfile.mkdtemp(prefix=f"privstream-kafka-{port}-")
        self._env = {
            **os.environ,
            "KAFKA_PORT": str(port),
            "KAFKA_CONTROLLER_PORT": str(controller_port),
            "KAFKA_WORK_DIR": self.work_dir,
            "KAFKA_START_TIMEOUT": str(int(START_TIMEOUT_S)),
            "KAFKA_EXTRA_PROPERTIES": extra_properties,
            "KAFKA_FORMAT_ARGS": format_args,
        }
        self._env.pop("KAFKA_CLEAN", None)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        log.info("starting local Kafka on %s (work dir %s)", self.bootstrap, self.work_dir)
        try:
            started = _run_launcher("start", self._env, LAUNCHER_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"{LAUNCHER} start did not finish in {exc.timeout:.0f}s") from exc
        if started.returncode != 0:
            raise RuntimeError(
                f"{LAUNCHER} start failed (exit {started.returncode}):\n"
                f"{started.stdout}{started.stderr}"
            )

    def stop(self) -> None:
        """SIGTERM the broker (SIGKILL after the launcher's stop timeout); keep its data."""
        try:
            stopped = _run_launcher("stop", self._env, STOP_TIMEOUT_S)
            if stopped.returncode != 0:
                log.warning("kafka.sh stop failed: %s%s", stopped.stdout, stopped.stderr)
        except subprocess.TimeoutExpired:
            log.warning("kafka.sh stop timed out; broker in %s may still run", self.work_dir)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def log_text(self) -> str:
        path = Path(self.work_dir) / "kafka.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _external_listener(port: int, controller_port: int, external: int, advertised: int) -> str:
    """server.properties lines: an EXTERNAL listener on ``external`` advertising ``advertised``."""
    return (
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port},"
        f"EXTERNAL://127.0.0.1:{external}\n"
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port},EXTERNAL://127.0.0.1:{advertised}\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
        "EXTERNAL:PLAINTEXT\n"
    )


@contextlib.contextmanager
def local_broker(
    port: int | None = None,
    *,
    extra_properties: str = "",
    format_args: str = "",
    advertised_port: int | None = None,
) -> Iterator[LocalBroker]:
    """A started ``LocalBroker``, closed (stopped, work dir deleted) on exit."""
    broker = LocalBroker(
        port,
        extra_properties=extra_properties,
        format_args=format_args,
        advertised_port=advertised_port,
    )
    try:
        broker.start()
        yield broker
    finally:
        broker.close()


@contextlib.contextmanager
def _local_broker() -> Iterator[str]:
    fixed = os.environ.get("PRIVSTREAM_TEST_KAFKA_PORT", "").strip()
    with local_broker(int(fixed) if fixed else None) as broker:
        yield broker.bootstrap


async def create_topics(
    bootstrap: str,
    names: Sequence[str],
    partitions: int = 1,
    *,
    within_s: float = 30.0,
    configs: Mapping[str, str] | None = None,
) -> None:
    """Create topics (replication factor 1, ``configs`` if given) and wait until they serve.

    Raises TimeoutError if they are not ready within `within_s` seconds. A
    topic that already exists is accepted if its partition count matches.
    Returns once every partition has a leader that answers a ListOffsets
    request, so producing right away does not hit NOT_LEADER retries.
    """
    topics = list(dict.fromkeys(names))
    if not topics:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s

    def remaining() -> float:
        left = deadline - loop.time()
        if left <= 0:
            raise TimeoutError(f"topics {topics} not ready after {within_s}s")
        return left

    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(within_s * 1000)
    )
    await admin.start()
    try:
        response = await admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=dict(configs or {})) for name in topics],
            timeout_ms=int(within_s * 1000),
        )
        for topic, code, *rest in response.topic_errors:
            error = for_code(code)
            if code != 0 and error is not TopicAlreadyExistsError:
                message = rest[0] if rest else None
                raise error(f"creating topic {topic!r}: {message or error.description}")

        while True:
            described = await admin.describe_topics(topics)
            counts = {
                t["topic"]: len(t["partitions"])
                for t in described
                if t["error_code"] == 0
                and t["partitions"]
                and all(p["leader"] >= 0 for p in t["partitions"])
            }
            if len(counts) == len(topics):
                break
            await asyncio.sleep(min(0.1, remaining()))
    finally:
        await admin.close()

    wrong = {name: n for name, n in counts.items() if n != partitions}
    if wrong:
        raise ValueError(f"topics exist with other partition counts than {partitions}: {wrong}")

    probe = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, request_timeout_ms=int(remaining() * 1000) + 1
    )
    await probe.start()
    try:
        tps = [TopicPartition(name, i) for name in topics for i in range(partitions)]
        await asyncio.wait_for(probe.end_offsets(tps), remaining())
    finally:
        await probe.stop()

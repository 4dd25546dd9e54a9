"""`privstream run` against a broker that wants SASL_SSL (SCRAM-SHA-512 over TLS).

The module starts a broker of its own with the local launcher (never the
session broker, never Docker, whatever KAFKA_BOOTSTRAP_SERVERS says): a
PLAINTEXT listener, which the test itself uses to create topics, produce
input and read output, and a SASL_SSL listener with certificates generated
by the test (tests/support/tls_certs.py) and a SCRAM user created when
the storage is formatted. Only the worker goes through SASL_SSL.

Checked: the worker sanitizes through SASL_SSL (password from a file or from
the environment), exactly once; a wrong password or an untrusted broker
certificate makes it exit 1 with a clear message within a deadline, never a
hang, and never with the password in its output; its DEBUG log holds no raw
value of the input.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import socket
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context

from tests.support.broker import LocalBroker, create_topics
from tests.support.tls_certs import TlsFiles, generate
from tests.support.worker_proc import (
    Collector,
    Message,
    WorkerProcess,
    decode,
    produce,
    read_all,
    started,
    unique_topics,
    write_config,
)

USER = "privstream-sasl-user"
MECHANISM = "SCRAM-SHA-512"
RECORDS = 500
#: a clean exit after a refused login or TLS handshake must come well before this
FAIL_DEADLINE_S = 60.0

DEVICE_CANARY = "CANARY-SASL-DEVICE-5e1d"
KEY_CANARY = "CANARY-SASL-KEY-"
HEADER_CANARY = b"CANARY-SASL-HEADER-c07b"
#: every raw salary ends in these digits (7 of them: no log timestamp has that many)
SALARY_CANARY = "0271828"

PRIVACY = {
    "privacy": {"epsilon": 2.0, "delta": 1.0e-6},
    "fields": [
        {"name": "device_id", "kind": "drop"},
        {"name": "seq", "kind": "public"},
        {
            "name": "salary",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": [1000, 5000],
            "epsilon": 1.0,
        },
        {"name": "state", "kind": "categorical", "domain": ["TX", "CA", "NY"], "epsilon": 0.5},
    ],
}


@dataclass(frozen=True)
class SaslBroker:
    plain: str  # PLAINTEXT bootstrap, for the test itself
    sasl: str  # SASL_SSL bootstrap, for the worker
    tls: TlsFiles
    password: str
    broker: LocalBroker


def _ports() -> tuple[int, int]:
    """A free client port whose successor (the launcher's controller port) is free
    too, and a third free port for the SASL_SSL listener."""
    for _ in range(100):
        with (
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as client,
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as controller,
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sasl,
        ):
            client.bind(("127.0.0.1", 0))
            port = int(client.getsockname()[1])
            try:
                controller.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            sasl.bind(("127.0.0.1", 0))
            return port, int(sasl.getsockname()[1])
    raise RuntimeError("no free pair of adjacent ports on 127.0.0.1")


def broker_properties(port: int, sasl_port: int, tls: TlsFiles) -> str:
    """server.properties lines adding a SASL_SSL listener to the launcher's broker.

    PLAINTEXT stays the inter-broker listener and CONTROLLER the KRaft one;
    SCRAM users come from the storage format (``--add-scram``), so the SCRAM
    login module needs no user list of its own. The PEM keystore holds an
    unencrypted PKCS#8 key plus the chain, hence no ``ssl.key.password``.
    """
    return "\n".join(
        [
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{port + 1},"
            f"SASL_SSL://127.0.0.1:{sasl_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port}",
            "listener.security.protocol.map="
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
            f"sasl.enabled.mechanisms={MECHANISM}",
            f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={tls.server_keystore}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={tls.ca_cert}",
            "ssl.client.auth=none",
        ]
    )


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    tls = generate(tmp_path_factory.mktemp("tls"))
    password = secrets.token_urlsafe(18)  # no comma, bracket or space: --add-scram syntax
    port, sasl_port = _ports()
    broker = LocalBroker(
        port,
        extra_properties=broker_properties(port, sasl_port, tls),
        format_args=f"--add-scram {MECHANISM}=[name={USER},password={password}]",
    )
    try:
        broker.start()
        yield SaslBroker(broker.bootstrap, f"127.0.0.1:{sasl_port}", tls, password, broker)
    finally:
        broker.close()


def client_options(env: SaslBroker, password: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": env.sasl,
        "security_protocol": "SASL_SSL",
        "ssl_context": create_ssl_context(cafile=str(env.tls.ca_cert)),
        "sasl_mechanism": MECHANISM,
        "sasl_plain_username": USER,
        "sasl_plain_password": password,
    }


def security(env: SaslBroker, **overrides: Any) -> dict[str, Any]:
    return {
        "protocol": "SASL_SSL",
        "ca_file": str(env.tls.ca_cert),
        "sasl_mechanism": MECHANISM,
        "username": USER,
        **overrides,
    }


def password_file(path: Path, password: str) -> str:
    path.write_text(password + "\n")
    path.chmod(0o600)
    return str(path)


def record(seq: int) -> dict[str, object]:
    return {
        "device_id": f"{DEVICE_CANARY}-{seq}",
        "seq": seq,
        "salary": float(f"{1000 + seq * 7 % 4000}.{SALARY_CANARY}"),
        "state": ["TX", "CA", "NY"][seq % 3],
    }


def messages(count: int) -> list[Message]:
    return [
        (
            f"{KEY_CANARY}{seq}".encode(),
            json.dumps(record(seq)).encode(),
            [("trace", HEADER_CANARY)],
        )
        for seq in range(count)
    ]


async def run_to_exit(config: Path, log: Path) -> tuple[int, str, str]:
    """Run a worker that must stop by itself within ``FAIL_DEADLINE_S`` (it is killed
    and the test fails on a hang); its exit code, log and own output."""
    worker = WorkerProcess(config, log)
    async with started(worker):
        try:
            code = await worker.wait(FAIL_DEADLINE_S)
        except TimeoutError:
            pytest.fail(
                f"worker still running after {FAIL_DEADLINE_S:.0f}s:\n{worker.log_text()[-6000:]}"
            )
    text = worker.log_text()
    return code, text, own_output(text)


#: a log line of the Kafka client library (format of `privstream run`'s logging)
CLIENT_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ [A-Z]+ aiokafka\b")


def own_output(text: str) -> str:
    """The worker's own words: its output without the Kafka client's log lines (those
    quote the broker's error and, at DEBUG, the SASL exchange with the username, so a
    check on them would pass whatever the worker itself says)."""
    return "\n".join(line for line in text.splitlines() if not CLIENT_LOG_LINE.match(line))


async def test_plain_client_through_sasl_ssl(sasl_broker: SaslBroker) -> None:
    """The listener itself works: TLS with the test CA, SCRAM with the formatted user."""
    topic = f"sasl-probe.{secrets.token_hex(4)}"
    await create_topics(sasl_broker.plain, [topic])
    options = client_options(sasl_broker, sasl_broker.password)
    producer = AIOKafkaProducer(acks="all", **options)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"through SASL_SSL")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic, auto_offset_reset="earliest", enable_auto_commit=False, **options
    )
    await consumer.start()
    try:
        got = await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()
    assert got.value == b"through SASL_SSL"


@pytest.mark.parametrize("source", ["password_file", "env"])
async def test_worker_sanitizes_through_sasl_ssl(
    sasl_broker: SaslBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    kafka = unique_topics(f"sasl-{source.replace('_', '-')}")
    await create_topics(sasl_broker.plain, [kafka["input_topic"]], partitions=2)
    await create_topics(sasl_broker.plain, [kafka["output_topic"], kafka["dead_letter_topic"]], 2)
    if source == "password_file":
        secured = security(
            sasl_broker, password_file=password_file(tmp_path / "pw", sasl_broker.password)
        )
    else:  # WorkerProcess passes the test's environment on to the worker
        secured = security(sasl_broker, username=None)
        monkeypatch.setenv("PRIVSTREAM_KAFKA_USERNAME", USER)
        monkeypatch.setenv("PRIVSTREAM_KAFKA_PASSWORD", sasl_broker.password)
    config = write_config(
        tmp_path / "config.yaml",
        sasl_broker.sasl,
        {**kafka, "transactions": True, "transaction_timeout_ms": 10000, "security": secured},
        PRIVACY,
    )

    await produce(sasl_broker.plain, kafka["input_topic"], messages(RECORDS))
    async with Collector(sasl_broker.plain, kafka["output_topic"]) as seen:
        worker = WorkerProcess(config, tmp_path / "worker.log")
        async with started(worker):
            try:
                await seen.wait_for(RECORDS, within_s=90)
            except TimeoutError:
                pytest.fail(
                    f"{len(seen.records)}/{RECORDS} sanitized records after 90s; worker log:\n"
                    f"{worker.log_text()[-6000:]}"
                )
            assert await worker.terminate() == 0, worker.log_text()[-6000:]

    sanitized = await read_all(sasl_broker.plain, kafka["output_topic"], partitions=2)
    dead = await read_all(sasl_broker.plain, kafka["dead_letter_topic"], partitions=2)
    assert Counter(body["seq"] for body in decode(sanitized)) == Counter(range(RECORDS))
    assert dead == []
    raw_salaries = {record(seq)["salary"] for seq in range(RECORDS)}
    for rec, body in zip(sanitized, decode(sanitized), strict=True):
        assert set(body) == {"seq", "salary", "state"}
        assert rec.key is None
        assert DEVICE_CANARY.encode() not in rec.value
        assert body["salary"] not in raw_salaries

    # the DEBUG log: no raw value, key or header of the input, no password
    text = worker.log_text()
    assert "DEBUG" in text, "the worker did not log at DEBUG: the check below would be vacuous"
    leaked = [
        canary
        for canary in (DEVICE_CANARY, KEY_CANARY, HEADER_CANARY.decode(), SALARY_CANARY)
        if canary in text
    ]
    assert leaked == [], f"raw input in the worker log: {leaked}"
    assert [s for s in map(json.dumps, raw_salaries) if s in text] == []
    assert sasl_broker.password not in text


async def test_wrong_password_fails_fast_and_clearly(
    sasl_broker: SaslBroker, tmp_path: Path
) -> None:
    kafka = unique_topics("sasl-badpw")
    await create_topics(sasl_broker.plain, [kafka["input_topic"]])
    wrong = f"WRONG-{secrets.token_hex(8)}"
    config = write_config(
        tmp_path / "config.yaml",
        sasl_broker.sasl,
        {
            **kafka,
            "transactions": True,
            "security": security(sasl_broker, password_file=password_file(tmp_path / "pw", wrong)),
        },
        PRIVACY,
    )
    code, text, own = await run_to_exit(config, tmp_path / "worker.log")
    assert code == 1, text[-6000:]
    assert USER in own, own[-6000:]
    assert "SCRAM" in own, own[-6000:]
    assert "authentication" in own.lower(), own[-6000:]
    assert wrong not in text
    assert sasl_broker.password not in text


@pytest.mark.parametrize("trust", ["no_ca", "wrong_ca"])
async def test_untrusted_broker_certificate_fails_fast_and_clearly(
    sasl_broker: SaslBroker, tmp_path: Path, trust: str
) -> None:
    """Without the test CA (system trust store) or with an unrelated CA, the
    handshake fails: a TLS error and exit 1, not endless reconnecting."""
    kafka = unique_topics(f"sasl-{trust.replace('_', '-')}")
    await create_topics(sasl_broker.plain, [kafka["input_topic"]])
    ca_file = None if trust == "no_ca" else str(sasl_broker.tls.other_ca_cert)
    pw = password_file(tmp_path / "pw", sasl_broker.password)
    config = write_config(
        tmp_path / "config.yaml",
        sasl_broker.sasl,
        {
            **kafka,
            "transactions": True,
            "security": security(sasl_broker, ca_file=ca_file, password_file=pw),
        },
        PRIVACY,
    )
    code, text, own = await run_to_exit(config, tmp_path / "worker.log")
    assert code == 1, text[-6000:]
    assert re.search(r"certificate|\bTLS\b|\bSSL\b", own, re.IGNORECASE), own[-6000:]
    assert sasl_broker.password not in text

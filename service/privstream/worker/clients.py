"""aiokafka client settings from the config, and which broker errors are final.

The worker never retries an error a human must fix (a wrong password, an
untrusted certificate, a missing ACL, a second worker with the same
transactional id): it stops with a message naming the setting. Everything
else (broker down, leader moves, timeouts, a transaction the broker expired
during an outage) is retried with backoff.

Fencing is the one error whose cause the broker does not say: the producer
epoch of the transactional id was bumped either by a second worker with the
same id (final) or by the broker itself, aborting a transaction older than
``transaction_timeout_ms`` (an outage: retriable). ``Fencing`` holds what
the session saw, and tells them apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as kafka_errors

from privstream.config.models import KafkaConfig
from privstream.config.runtime import Runtime
from privstream.errors import BrokerError
from privstream.kafka.compat import (
    MetadataRequest,
    admin_client_module,
    client_module,
    create_conn,
)
from privstream.kafka.options import connection_options

log = logging.getLogger("privstream.worker")
#: how long closing a client (or aborting its transaction) may take when a broker is gone
CLOSE_TIMEOUT_S = 10.0
#: record batch size for the sanitized topic (bench/e2e.py: larger batches pay up to here)
MAX_BATCH_BYTES = 2**20


class _NoAutoCreate(MetadataRequest):  # type: ignore[misc]  # aiokafka is untyped
    """A metadata request that never lets the broker create the topics it names."""

    def __init__(
        self, topics: list[str] | None = None, allow_auto_topic_creation: bool | None = False
    ) -> None:
        super().__init__(topics, allow_auto_topic_creation)


def _forbid_topic_auto_creation() -> None:
    """Every aiokafka client of this process asks for metadata with auto-creation off.

    aiokafka (0.14) builds its metadata requests with ``allow_auto_topic_creation``
    unset, which it sends as true, and has no option for it (the Java client's
    ``allow.auto.create.topics``): against a broker with
    ``auto.create.topics.enable``, a consumer assigned, a producer sending or an
    admin describing a missing topic creates it, with the broker's default
    partition count and ``cleanup.policy=delete``. A ledger changelog created so
    gives each subject one budget per partition. The request class is looked up in
    the two modules that build these requests, so it is replaced there.
    """
    for module in (client_module, admin_client_module):
        if getattr(module, "MetadataRequest", None) not in (MetadataRequest, _NoAutoCreate):
            raise ImportError(f"{module.__name__} no longer builds MetadataRequest (aiokafka)")
        setattr(module, "MetadataRequest", _NoAutoCreate)  # noqa: B010 -- a library's global


_forbid_topic_auto_creation()


def open_transaction_wait_s(kafka: KafkaConfig) -> float:
    """How long to wait for another producer's transaction to complete before giving
    up: its coordinator aborts one open past ``transaction_timeout_ms`` at its next
    check (the broker's ``transaction.abort.timed.out.transaction.cleanup.interval.ms``,
    10 s by default)."""
    return 2 * kafka.transaction_timeout_ms / 1000 + 30


def common_options(kafka: KafkaConfig, runtime: Runtime) -> dict[str, Any]:
    """Connection settings shared by the consumer and the producer."""
    return connection_options(kafka, runtime.credentials, kafka.client_id)


def consumer_options(kafka: KafkaConfig, runtime: Runtime) -> dict[str, Any]:
    return {
        **common_options(kafka, runtime),
        "group_id": kafka.group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        # never sanitize what an upstream transaction may still abort
        "isolation_level": "read_committed",
        # bounded memory: what the fetcher may hold ahead of processing
        "fetch_max_bytes": kafka.max_batch_bytes,
        "max_partition_fetch_bytes": min(kafka.max_batch_bytes, 2**20),
        "session_timeout_ms": kafka.session_timeout_ms,
        "heartbeat_interval_ms": max(kafka.session_timeout_ms // 3, 100),
    }


def transactional_id(kafka: KafkaConfig, runtime: Runtime) -> str:
    """Unique per live replica; stable, a restarted replica aborts its predecessor's open
    transaction at once (zombies are fenced by the group generation: ``generation_fence``)."""
    return f"{kafka.transactional_id_prefix}-{runtime.replica_id}"


def batch_bytes(kafka: KafkaConfig) -> int:
    """The most bytes one record batch this worker writes may hold."""
    return min(kafka.max_message_bytes, MAX_BATCH_BYTES)


def producer_options(kafka: KafkaConfig, runtime: Runtime) -> dict[str, Any]:
    options = {
        **common_options(kafka, runtime),
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": 5,
        "max_request_size": kafka.max_message_bytes,
        # the batches of producer.send (dead letters); the sanitized topic's are written
        # by produce.BatchSender to the same bound: one Kafka batch may not exceed the
        # topic's max.message.bytes, which max_message_bytes states
        "max_batch_size": batch_bytes(kafka),
    }
    if kafka.transactions:
        options["transactional_id"] = transactional_id(kafka, runtime)
        options["transaction_timeout_ms"] = kafka.transaction_timeout_ms
    return options


_AUTHORIZATION = (
    kafka_errors.TopicAuthorizationFailedError,
    kafka_errors.GroupAuthorizationFailedError,
    kafka_errors.ClusterAuthorizationFailedError,
    kafka_errors.TransactionalIdAuthorizationFailed,
)


#: the broker bumped this transactional id's epoch (aiokafka raises the second as the first)
_FENCED = (kafka_errors.ProducerFenced, kafka_errors.InvalidProducerEpoch)
#: a restart after a fencing takes about a second: a rival fences the fresh producer this soon
RIVAL_WINDOW_S = 30.0


def is_fenced(exc: BaseException | None) -> bool:
    """``exc``, or an exception in its cause chain, says the producer was fenced."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:  # a context chain may loop
        if isinstance(exc, _FENCED):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


@dataclass(frozen=True, kw_only=True)
class Fencing:
    """What a session saw when its producer was fenced: an expired transaction or a rival.

    The broker aborts a transaction open longer than ``transaction_timeout_ms``
    and bumps the epoch, so a worker cut off mid-transaction is fenced when it
    gets through again; no other worker is involved. Evidence of that: the
    transaction is older than the timeout (the broker's clock for it starts
    at its first partition, after ours), or a broker connection dropped or the
    readiness probe went unanswered since it began. Without evidence the first
    fencing still restarts the session (on a fresh producer, which fences a
    rival in turn); a rival shows itself by fencing that fresh producer again
    within ``RIVAL_WINDOW_S``.

    An expiry is impossible, whatever the evidence, while the producer is
    younger than the timeout: the broker starts a transaction's clock when its
    first partition joins, after this producer was created, so a transaction
    the broker aborted for age is older than the producer can be. This is what
    keeps a loaded machine (probes answered late) from hiding a rival.
    """

    #: seconds the open transaction had run; None when none was open
    transaction_age_s: float | None
    timeout_s: float
    #: a broker connection dropped, or the probe went unanswered, since it began
    connection_lost: bool
    #: when the previous session ended fenced too: this producer's age; else None
    refenced_after_s: float | None
    #: seconds since this session's producer was created
    producer_age_s: float

    @property
    def expired(self) -> bool:
        """The broker aborted the transaction during an outage (no rival needed)."""
        if self.transaction_age_s is None or self.producer_age_s < self.timeout_s:
            return False
        return self.connection_lost or self.transaction_age_s >= self.timeout_s

    @property
    def rival(self) -> bool:
        """Fenced again, on a fresh producer, when no expiry can explain it.

        Younger than the transaction timeout, the fresh producer cannot have been
        expired, however long its restart took (backoff grows under load); older,
        it takes a fencing within ``RIVAL_WINDOW_S`` and no outage.
        """
        again = self.refenced_after_s
        if again is None:
            return False
        young = self.producer_age_s < self.timeout_s
        return young or (again < RIVAL_WINDOW_S and not self.expired)

    def explain(self, kafka: KafkaConfig, runtime: Runtime) -> str:
        """One line for the WARNING of a fencing the worker recovers from."""
        age = self.transaction_age_s
        opened = "no transaction open" if age is None else f"transaction open {age:.1f} s"
        if self.expired:
            dropped = ", the broker unreachable meanwhile" if self.connection_lost else ""
            return (
                f"transaction expired during an outage ({opened}, transaction_timeout_ms "
                f"{kafka.transaction_timeout_ms}{dropped}): the broker aborted it and fenced "
                "the producer; a new session resumes from the committed offsets and "
                "releases the aborted batch again with the same noise"
            )
        return (
            f"producer fenced with no outage seen ({opened}): another worker may use "
            f"transactional id {transactional_id(kafka, runtime)!r}; starting a fresh "
            "producer (fenced again before it is older than transaction_timeout_ms, or within "
            f"{RIVAL_WINDOW_S:.0f} s, the worker stops)"
        )


def final_error(
    exc: BaseException, kafka: KafkaConfig, runtime: Runtime, fencing: Fencing | None = None
) -> BrokerError | None:
    """A BrokerError explaining ``exc`` if retrying cannot fix it, else None.

    A fencing is final only with a rival: ``fencing`` (what the session saw)
    says whether it is one; without it, a fencing is taken for a rival.
    """
    security = kafka.security
    user = runtime.credentials.username if runtime.credentials else None
    refused = (
        kafka_errors.AuthenticationFailedError,
        kafka_errors.SaslAuthenticationFailed,
        kafka_errors.IllegalSaslStateError,
    )
    if isinstance(exc, refused):
        return BrokerError(
            f"broker {kafka.bootstrap_servers} refused authentication for user {user!r} "
            f"with {security.sasl_mechanism}: check the username and the password "
            "(kafka.security.password_file or PRIVSTREAM_KAFKA_PASSWORD)"
        )
    if isinstance(exc, kafka_errors.UnsupportedSaslMechanismError):
        return BrokerError(
            f"broker {kafka.bootstrap_servers} does not offer {security.sasl_mechanism}: "
            "set kafka.security.sasl_mechanism to one it enables"
        )
    if isinstance(exc, ssl.SSLCertVerificationError):
        return BrokerError(
            f"TLS: the certificate of {kafka.bootstrap_servers} is not trusted "
            f"({exc.verify_message}): set kafka.security.ca_file to the CA that signed it"
        )
    if isinstance(exc, ssl.SSLError):
        return BrokerError(
            f"TLS handshake with {kafka.bootstrap_servers} failed ({exc.reason}): "
            f"check kafka.security.protocol ({security.protocol}) and the certificates"
        )
    if isinstance(exc, _AUTHORIZATION):
        return BrokerError(
            f"the broker denied an operation ({type(exc).__name__}) to user {user!r}: grant "
            f"ACLs for topics, group {kafka.group_id!r} and transactional id "
            f"{transactional_id(kafka, runtime)!r}"
        )
    if isinstance(exc, _FENCED):
        return _rival(kafka, runtime, fencing) if fencing is None or fencing.rival else None
    if isinstance(exc, kafka_errors.UnsupportedVersionError | kafka_errors.KafkaConfigurationError):
        return BrokerError(f"broker {kafka.bootstrap_servers}: {exc}")
    cause = exc.__cause__ or exc.__context__
    return final_error(cause, kafka, runtime, fencing) if cause is not None else None


def _rival(kafka: KafkaConfig, runtime: Runtime, fencing: Fencing | None) -> BrokerError:
    again = fencing.refenced_after_s if fencing is not None else None
    how = (
        "fenced"
        if again is None
        else f"fenced again {again:.1f} s after a fencing restarted it, with no outage "
        "in between: a second live worker, not a transaction expired during an outage"
    )
    return BrokerError(
        f"another worker uses transactional id {transactional_id(kafka, runtime)!r} "
        f"(this producer was {how}): every live replica needs its own --replica-id "
        "(or PRIVSTREAM_REPLICA_ID)"
    )


def live_connections(client: Any) -> tuple[Any, ...]:
    """The connected broker connections of an aiokafka client, to notice one dropping later.

    Reads aiokafka's private ``AIOKafkaClient._conns``; an aiokafka without it
    gives none, and outage evidence then rests on the transaction age and the
    probe. A dropped connection is closed for good (aiokafka reconnects with a
    new object), so ``connected()`` on a kept one tells whether it dropped.
    The bootstrap connection is left out: aiokafka closes it on purpose once
    it knows the brokers.
    """
    conns = getattr(client, "_conns", {})
    return tuple(
        conn for (node, _), conn in conns.items() if node != "bootstrap" and conn.connected()
    )


async def broker_answers(client: Any, topic: str, timeout_s: float) -> bool:
    """True once a known broker answers a metadata request for ``topic`` within ``timeout_s``.

    One request per broker, over ``client``'s connections (aiokafka reconnects
    a dropped one first): any answer is a round trip, and one topic keeps it
    small on big clusters.
    """
    request = MetadataRequest([topic], allow_auto_topic_creation=False)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    nodes = [broker.nodeId for broker in client.cluster.brokers()]
    pending = {asyncio.ensure_future(client.send(node, request)) for node in nodes}
    try:
        while pending:
            done, pending = await asyncio.wait(
                pending, timeout=deadline - loop.time(), return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                return False
            if any(not task.cancelled() and task.exception() is None for task in done):
                return True
        return False
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


DIAGNOSE_TIMEOUT_S = 15.0


async def diagnose(kafka: KafkaConfig, runtime: Runtime) -> BrokerError | None:
    """Why can no bootstrap server be reached? A BrokerError if a human must fix it.

    aiokafka's bootstrap logs the real error and raises a bare connection
    error, so a wrong password looks like a broker that is down. One direct
    connection per server (TLS handshake and SASL included) recovers it.
    """
    options = common_options(kafka, runtime)
    for server in kafka.bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            conn = await asyncio.wait_for(
                create_conn(
                    host.strip("[]"),
                    int(port),
                    client_id=kafka.client_id,
                    ssl_context=options.get("ssl_context"),
                    security_protocol=kafka.security.protocol,
                    sasl_mechanism=options.get("sasl_mechanism"),
                    sasl_plain_username=options.get("sasl_plain_username"),
                    sasl_plain_password=options.get("sasl_plain_password"),
                ),
                DIAGNOSE_TIMEOUT_S,
            )
        except (kafka_errors.KafkaError, OSError, TimeoutError, ValueError) as exc:
            final = final_error(exc, kafka, runtime)
            if final is not None:
                return final
        else:
            conn.close()
    return None


#: a topic's two group-less readers: read_committed (what committed transactions wrote) and
#: read_uncommitted (whose end offsets are the high watermarks: ``changelog.stable_ends``)
StableReaders = tuple[AIOKafkaConsumer, AIOKafkaConsumer]


def group_less_reader(kafka: KafkaConfig, runtime: Runtime, isolation: str) -> AIOKafkaConsumer:
    """A reader of internal topics from their start: no group, no committed offsets."""
    return AIOKafkaConsumer(
        **common_options(kafka, runtime),
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        auto_offset_reset="earliest",
    )


async def stable_readers(
    kafka: KafkaConfig, runtime: Runtime, stack: contextlib.AsyncExitStack
) -> StableReaders:
    """The two readers of ``StableReaders``, started and closed with ``stack``."""
    made = []
    for isolation in ("read_committed", "read_uncommitted"):
        reader = group_less_reader(kafka, runtime, isolation)
        stack.push_async_callback(close_client, reader)
        await reader.start()
        made.append(reader)
    return made[0], made[1]


async def close_client(client: AIOKafkaConsumer | AIOKafkaProducer) -> None:
    """Stop a client without letting a dead broker hold the shutdown."""
    try:
        await asyncio.wait_for(client.stop(), CLOSE_TIMEOUT_S)
    except Exception as exc:  # closing is best effort
        log.debug("closing %s: %s", type(client).__name__, type(exc).__name__)

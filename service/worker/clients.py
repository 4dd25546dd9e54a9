"""aiokafka client settings from the config, and which broker errors are final.

The worker never retries an error a human must fix (a wrong password, an
untrusted certificate, a missing ACL, a second worker with the same
transactional id): it stops with a message naming the setting. Everything
else (broker down, leader moves, timeouts) is retried with backoff.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.conn import create_conn
from aiokafka.helpers import create_ssl_context

from service.config.models import KafkaConfig
from service.config.runtime import Runtime
from service.errors import BrokerError


def common_options(kafka: KafkaConfig, runtime: Runtime) -> dict[str, Any]:
    """Connection settings shared by the consumer and the producer."""
    security = kafka.security
    options: dict[str, Any] = {
        "bootstrap_servers": kafka.bootstrap_servers,
        "client_id": kafka.client_id,
        "security_protocol": security.protocol,
    }
    if security.uses_tls:
        context = create_ssl_context(
            cafile=security.ca_file, certfile=security.cert_file, keyfile=security.key_file
        )
        context.check_hostname = security.check_hostname
        options["ssl_context"] = context
    if runtime.credentials is not None:
        options["sasl_mechanism"] = security.sasl_mechanism
        options["sasl_plain_username"] = runtime.credentials.username
        options["sasl_plain_password"] = runtime.credentials.password
    return options


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
    """Stable per replica: a restarted replica fences its own zombie (never a random id)."""
    return f"{kafka.transactional_id_prefix}-{runtime.replica_id}"


def producer_options(kafka: KafkaConfig, runtime: Runtime) -> dict[str, Any]:
    options = {
        **common_options(kafka, runtime),
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": 5,
        "max_request_size": kafka.max_message_bytes,
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


def final_error(exc: BaseException, kafka: KafkaConfig, runtime: Runtime) -> BrokerError | None:
    """A BrokerError explaining ``exc`` if retrying cannot fix it, else None."""
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
    if isinstance(exc, kafka_errors.ProducerFenced):
        return BrokerError(
            f"another worker uses transactional id {transactional_id(kafka, runtime)!r}: "
            "every live replica needs its own --replica-id (or PRIVSTREAM_REPLICA_ID)"
        )
    if isinstance(exc, kafka_errors.UnsupportedVersionError | kafka_errors.KafkaConfigurationError):
        return BrokerError(f"broker {kafka.bootstrap_servers}: {exc}")
    cause = exc.__cause__ or exc.__context__
    return final_error(cause, kafka, runtime) if cause is not None else None


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

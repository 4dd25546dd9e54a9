"""Connection options for aiokafka clients: bootstrap, client id, TLS and SASL, built once.

The worker's consumer, producer and admin client (``privstream.worker.clients``)
and ``estimate --topic``'s reader (``privstream.estimate.source``) all connect
through ``connection_options``, so a TLS or SASL setting means the same
thing everywhere (``check_hostname: false`` included, which the runtime
warns about at start).
"""

from __future__ import annotations

from typing import Any

from privstream.config.models import KafkaConfig
from privstream.config.runtime import Credentials
from privstream.kafka.compat import create_ssl_context


def connection_options(
    kafka: KafkaConfig, credentials: Credentials | None, client_id: str
) -> dict[str, Any]:
    """Keyword options every aiokafka client of ``kafka`` takes."""
    security = kafka.security
    options: dict[str, Any] = {
        "bootstrap_servers": kafka.bootstrap_servers,
        "client_id": client_id,
        "security_protocol": security.protocol,
    }
    if security.uses_tls:
        context = create_ssl_context(
            cafile=security.ca_file, certfile=security.cert_file, keyfile=security.key_file
        )
        context.check_hostname = security.check_hostname
        options["ssl_context"] = context
    if credentials is not None:
        options["sasl_mechanism"] = security.sasl_mechanism
        options["sasl_plain_username"] = credentials.username
        options["sasl_plain_password"] = credentials.password
    return options

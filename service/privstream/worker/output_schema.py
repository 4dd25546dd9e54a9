"""Avro, Protobuf and JSON Schema output: the derived schema registered under
``<output_topic>-value``, BACKWARD.

At the start of the worker's first session (before any record is read) the
subject's compatibility is set to BACKWARD and the schema derived from the
config (``privstream.pipeline.avro_schema``; Protobuf and JSON Schema:
``privstream.worker.protobuf_output``, ``json_schema_output``) is registered. The registry
answers with its id; the same config registers the same text, so a restart
gets the same id and adds no version. A config change whose schema the
registry refuses as incompatible with the latest version stops the worker
(``OutputSchemaError``, exit non-zero) with the fields that break it: the
analysts' readers of the topic would fail on the new records otherwise.

A registry that does not answer is retried like one that is down for the
input (``SchemaRegistryUnavailableError``: not ready, backoff).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Protocol

from privstream.config import AppConfig
from privstream.config.registry import SchemaRegistryConfig
from privstream.errors import OutputSchemaError
from privstream.pipeline import RecordPlan
from privstream.pipeline.avro_compat import backward_problems
from privstream.pipeline.avro_encode import AvroEncoder
from privstream.pipeline.avro_schema import hash_report_fields, output_schema, schema_text
from privstream.pipeline.results import BatchResult
from privstream.worker.schemas import connection, unavailable

log = logging.getLogger("privstream.worker")
_CONTENT = "application/vnd.schemaregistry.v1+json"


class Encoder(Protocol):
    """Writes a batch's sanitized JSON records in the output format."""

    def encode(self, result: BatchResult) -> BatchResult: ...


class Derived(Protocol):
    """One format's output schema derived from a config."""

    @property
    def text(self) -> str:
        """What is registered."""

    @property
    def schema_type(self) -> str | None:
        """The registry's ``schemaType`` (None: Avro, the registry's default)."""

    @property
    def advice(self) -> str:
        """How to fix a config whose schema the registry refuses as incompatible."""

    def encoder(self, schema_id: int) -> Encoder:
        """The encoder of the schema registered as ``schema_id``."""

    def problems(self, latest: str) -> list[str]:
        """Why records written with the registered text ``latest`` cannot be read with this
        schema, one line per field; [] if that cannot be told (the registry's message then
        stands alone)."""


class AvroDerived:
    """The Avro output schema (``privstream.pipeline.avro_schema``)."""

    schema_type = None
    advice = (
        "keep the field as it was, add new fields with on_missing: null, or write to a new "
        "kafka.output_topic"
    )

    def __init__(self, schema: dict[str, Any], reports: tuple[str, ...]) -> None:
        self.schema = schema
        self.text = schema_text(schema)
        #: the local-hashing fields (``avro_schema.hash_report_fields``)
        self._reports = reports

    def encoder(self, schema_id: int) -> Encoder:
        return AvroEncoder(schema_id, self.schema, self._reports)

    def problems(self, latest: str) -> list[str]:
        found = json.loads(latest)
        return backward_problems(found, self.schema) if isinstance(found, dict) else []


class OutputSchema:
    """The output schema of one config and the registry it goes to."""

    def __init__(self, registry: SchemaRegistryConfig, subject: str, derived: Derived) -> None:
        self.subject = subject
        self.derived = derived
        self._registry = registry
        self._quoted = urllib.parse.quote(subject, safe="")

    @classmethod
    def of(cls, config: AppConfig, plan: RecordPlan) -> OutputSchema | None:
        """The config's output schema, or None for JSON output.

        Raises ``OutputSchemaError`` naming a field the format cannot hold.
        """
        kafka = config.needs_kafka("run")
        registry = kafka.schema_registry
        if kafka.output_encoding == "json" or registry is None:
            return None
        subject = f"{kafka.output_topic}-value"
        derived: Derived
        if kafka.output_encoding == "protobuf":  # its packages only where it is used
            from privstream.worker.protobuf_output import ProtobufDerived

            derived = ProtobufDerived.of(config, plan)
        elif kafka.output_encoding == "json_schema":
            from privstream.worker.json_schema_output import JsonSchemaDerived

            derived = JsonSchemaDerived.of(config, plan)
        else:
            derived = AvroDerived(output_schema(config.fields, plan), hash_report_fields(plan))
        return cls(registry, subject, derived)

    def register(self) -> Encoder:
        """Set BACKWARD on the subject, register the schema; the encoder of its id.

        Raises ``OutputSchemaError`` if the registry refuses the schema and
        ``SchemaRegistryUnavailableError`` if it does not answer.
        """
        self._call("PUT", f"/config/{self._quoted}", {"compatibility": "BACKWARD"})
        body = {"schema": self.derived.text}
        if self.derived.schema_type is not None:
            body["schemaType"] = self.derived.schema_type
        answer = self._call("POST", f"/subjects/{self._quoted}/versions", body)
        schema_id = int(answer["id"])
        log.info("output schema of %s is registry id %d", self.subject, schema_id)
        return self.derived.encoder(schema_id)

    def _call(self, method: str, path: str, body: dict[str, Any]) -> Any:
        url = self._registry.url + path
        try:
            return self._request(method, path, body)
        except urllib.error.HTTPError as exc:
            if exc.code in (409, 422):  # incompatible, or a schema the registry refuses
                raise self._refused(exc.code, _message(exc)) from None
            raise unavailable(url, f"HTTP {exc.code} {exc.reason}") from None
        except (OSError, ValueError) as exc:  # refused, reset, timed out, TLS, not JSON
            raise unavailable(url, f"{type(exc).__name__}: {exc}") from None

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        headers, tls = connection(self._registry)
        request = urllib.request.Request(  # noqa: S310 -- the config checks the scheme
            self._registry.url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={**headers, "Content-Type": _CONTENT},
        )
        with urllib.request.urlopen(  # noqa: S310 -- http(s) only
            request, timeout=self._registry.timeout_ms / 1000, context=tls
        ) as response:
            return json.loads(response.read())

    def _refused(self, code: int, message: str) -> OutputSchemaError:
        if code != 409:
            return OutputSchemaError(
                f"the registry {self._registry.url} refuses the output schema of "
                f"{self.subject} (HTTP {code}: {message}); please report it"
            )
        latest = self._latest()
        try:
            problems = [] if latest is None else self.derived.problems(latest)
        except (ValueError, TypeError, KeyError):  # not a schema of this format
            problems = []
        why = "; ".join(problems) if problems else f"the registry says: {message}"
        return OutputSchemaError(
            f"the output schema derived from this config is not BACKWARD compatible with "
            f"the latest version of {self.subject} in {self._registry.url}: {why}. Readers "
            f"of the topic could not read the new records beside the old: {self.derived.advice}"
        )

    def _latest(self) -> str | None:
        """The latest registered schema's text; None if it cannot be had (the registry's
        message then stands alone)."""
        try:
            answer = self._request("GET", f"/subjects/{self._quoted}/versions/latest")
            return str(answer["schema"])
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _message(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("message", exc.reason))
    except (OSError, ValueError, AttributeError):
        return str(exc.reason)

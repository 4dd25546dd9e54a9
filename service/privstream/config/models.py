"""The configuration tree: frozen pydantic models, unknown keys rejected.

The config describes *what* to release. It knows nothing of Kafka clients or
of mechanism objects; ``privstream.pipeline.plan`` turns it into mechanisms.
"""

# no ``from __future__ import annotations``: pydantic would compile every field's
# annotation from its text at start-up (about 2.5 ms of every command, docs/benchmarks.md)
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from privstream.config.aggregates import AggregateConfig, aggregate_problems
from privstream.config.fields import Delta, Epsilon, FieldConfig, Strict
from privstream.config.ledger import (
    LedgerConfig,
    subject_problems,
    time_problems,
    topic_name_problem,
)
from privstream.config.missing import presence_problems
from privstream.config.paths import path_problems, split_path
from privstream.config.registry import SchemaRegistryConfig
from privstream.errors import ConfigError


class SecurityConfig(Strict):
    """How the clients authenticate the broker and themselves.

    Credentials never live in this file: the password comes from
    ``password_file`` (e.g. a mounted Kubernetes Secret) or the environment
    (``privstream.config.runtime``).
    """

    protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    #: PEM CA bundle that signs the broker's certificate (default: the system store)
    ca_file: Path | None = None
    #: client certificate and key (PEM) for mutual TLS
    cert_file: Path | None = None
    key_file: Path | None = None
    check_hostname: bool = True
    sasl_mechanism: Literal["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"] = "SCRAM-SHA-512"
    username: str | None = None
    password_file: Path | None = None

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @model_validator(mode="after")
    def _consistent(self) -> "SecurityConfig":
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (mutual TLS needs both)")
        tls_only = [name for name in ("ca_file", "cert_file") if getattr(self, name) is not None]
        if tls_only and not self.uses_tls:
            raise ValueError(
                f"{' and '.join(tls_only)} given but protocol is {self.protocol}: "
                "use SSL or SASL_SSL"
            )
        return self


#: how values are encoded: JSON text, or Avro, Protobuf or JSON (JSON Schema) in the
#: Confluent wire format (docs/avro.md)
Encoding = Literal["json", "avro", "protobuf", "json_schema"]


class KafkaConfig(Strict):
    """Where records come from and go to, and how they are delivered."""

    bootstrap_servers: str = "127.0.0.1:9092"
    input_topic: str = Field(min_length=1)
    output_topic: str = Field(min_length=1)
    dead_letter_topic: str = Field(min_length=1)
    group_id: str = Field(default="privstream", min_length=1)
    client_id: str = "privstream"
    max_batch_records: int = Field(default=2000, ge=1, le=100_000)
    poll_timeout_ms: int = Field(default=500, ge=1, le=60_000)
    #: bound on the raw bytes fetched ahead of processing (the consumer's fetch_max_bytes)
    max_batch_bytes: int = Field(default=16 * 2**20, ge=2**16, le=2**30)
    #: the largest message the producer sends (the broker's message.max.bytes)
    max_message_bytes: int = Field(default=2**20, ge=2**10, le=2**30)
    #: exactly-once: one transaction per batch holding its outputs and consumed offsets
    transactions: bool = True
    #: the transactional id is ``<prefix>-<replica id>``, stable across restarts
    transactional_id_prefix: str = Field(default="privstream", min_length=1)
    #: enters every noise key: set a new one when the input topic is re-created, or when a
    #: second cluster with a topic of the same name shares the noise key (docs: Operations)
    noise_domain: str = ""
    transaction_timeout_ms: int = Field(default=60_000, ge=1_000, le=900_000)
    session_timeout_ms: int = Field(default=10_000, ge=1_000, le=300_000)
    #: how long SIGTERM waits for the batch in flight before abandoning it
    drain_timeout_ms: int = Field(default=30_000, ge=0, le=600_000)
    security: SecurityConfig = SecurityConfig()
    #: how input values are encoded: JSON text, or Avro, Protobuf or JSON (JSON Schema) in
    #: the Confluent wire format (docs/avro.md)
    format: Encoding = "json"
    #: how sanitized values are encoded (default: the input's format, JSON for JSON): ``avro``,
    #: ``protobuf`` and ``json_schema`` are the Confluent wire format with a schema derived
    #: from the fields, registered under ``<output_topic>-value``
    output_format: Encoding | None = None
    #: where writer schemas come from and the output schema goes (required by every format
    #: and output format but ``json``)
    schema_registry: SchemaRegistryConfig | None = None

    @property
    def output_encoding(self) -> Encoding:
        """How sanitized values are written: ``output_format``, else the input's format."""
        return self.output_format or self.format

    @property
    def avro_output(self) -> bool:
        """Sanitized values are written as Avro (``output_format``, else the input's)."""
        return self.output_encoding == "avro"

    @model_validator(mode="after")
    def _registry_for_framed(self) -> "KafkaConfig":
        if self.format != "json" and self.schema_registry is None:
            raise ValueError(
                f"kafka.format {self.format} needs kafka.schema_registry (its url at least)"
            )
        if self.output_encoding != "json" and self.schema_registry is None:
            raise ValueError(
                f"kafka.output_format {self.output_encoding} needs kafka.schema_registry "
                "(its url at least)"
            )
        return self

    @field_validator("input_topic", "output_topic", "dead_letter_topic")
    @classmethod
    def _kafka_topic_name(cls, name: str) -> str:
        problem = topic_name_problem(name)
        if problem is not None:
            raise ValueError(problem)
        return name

    @model_validator(mode="after")
    def _distinct_topics(self) -> "KafkaConfig":
        topics = [self.input_topic, self.output_topic, self.dead_letter_topic]
        if len(set(topics)) != 3:
            raise ValueError(
                "input_topic, output_topic and dead_letter_topic must be three different topics"
            )
        return self


class PrivacyConfig(Strict):
    """The per-record budget that the fields' shares must fit into."""

    epsilon: Epsilon
    delta: Delta = 0.0
    #: one individual may stand behind up to this many records (correlated records)
    group_size: int = Field(default=1, ge=1, le=10_000)
    #: the field that identifies the individual (kind drop unless subject_public)
    subject: str | None = Field(default=None, min_length=1)
    #: the subject field may be of kind public (its values are not personal)
    subject_public: bool = False
    #: a cap per subject per window, enforced by suppressing records (docs/ledger.md)
    ledger: LedgerConfig | None = None


class HttpConfig(Strict):
    """The /metrics, /healthz and /readyz endpoint."""

    #: loopback by default (no authentication); a pod or container sets 0.0.0.0 explicitly
    host: str = "127.0.0.1"
    port: int = Field(default=9400, ge=0, le=65535)


class ClampedCountsConfig(Strict):
    """Per-field counts of clamped raw values, released with noise per fixed window."""

    #: per record, all fields together (discrete Laplace, one window per record)
    epsilon: Epsilon
    window_seconds: float = Field(default=60.0, ge=1.0, le=86_400.0)


class MetricsConfig(Strict):
    """What /metrics exports beyond the service counters (docs/metrics.md)."""

    #: shadow draws per measured field and round, for the error-versus-gamma metrics
    canaries: int = Field(default=32, ge=1, le=4096)
    #: at most one round per this many seconds, after a committed batch (0: every batch)
    canary_interval_seconds: float = Field(default=1.0, ge=0.0, le=3600.0)
    #: label dead letters by reason code: a function of the raw record, so off by default
    dead_letter_reasons: bool = False
    #: clamped counts are a function of raw values: off (None) unless given an epsilon
    clamped_counts: ClampedCountsConfig | None = None

    @field_validator("clamped_counts", mode="before")
    @classmethod
    def _no_plain_switch(cls, value: object) -> object:
        if value is False:
            return None
        if value is True:
            raise ValueError(
                "clamped counts are released with noise: give {epsilon: 0.1, "
                "window_seconds: 60} (their epsilon adds to the record's) or leave them off"
            )
        return value


class AppConfig(Strict):
    """The whole privstream configuration."""

    #: the topics and the broker: ``run``, ``topics`` and ``estimate --topic`` need it,
    #: ``sanitize`` and ``explain`` (files, no broker) do not
    kafka: KafkaConfig | None = None
    privacy: PrivacyConfig
    fields: tuple[FieldConfig, ...]
    #: noisy counts, histograms, sums and means per window (docs/aggregates.md)
    aggregates: tuple[AggregateConfig, ...] = ()
    http: HttpConfig = HttpConfig()
    metrics: MetricsConfig = MetricsConfig()

    def needs_kafka(self, command: str) -> KafkaConfig:
        """The ``kafka`` section, which ``command`` (one that talks to a broker) needs."""
        if self.kafka is None:
            raise ConfigError(
                [
                    f"kafka: required by `privstream {command}` (it talks to a broker) but the "
                    "config has no kafka section; add one with at least input_topic, "
                    "output_topic and dead_letter_topic (docs/reference/config.md)"
                ]
            )
        return self.kafka

    @model_validator(mode="after")
    def _memoize_by_names_a_device_field(self) -> "AppConfig":
        # cross-field: memoize_by must name another field that can hold a device id
        from privstream.config.fields import check_memo_references

        check_memo_references(self.fields)
        self._check_paths()
        self._check_subject()
        self._check_presence()
        self._check_aggregates()
        return self

    def _check_aggregates(self) -> None:
        privacy = self.privacy
        problems = aggregate_problems(
            self.aggregates, self.fields, privacy.subject, privacy.group_size
        )
        if problems:
            details = [
                InitErrorDetails(
                    type=PydanticCustomError("aggregate", message),
                    loc=("aggregates", position, setting),
                    input=self.aggregates[position].name,
                )
                for position, setting, message in problems
            ]
            raise ValidationError.from_exception_data("AppConfig", details)

    def _check_paths(self) -> None:
        problems = path_problems(self.fields)
        subject = self.privacy.subject
        if subject is not None and split_path(subject) != (subject,):
            raise ValueError(
                f"privacy.subject {subject!r} is a path into a nested object or holds an "
                "escape; the subject must be a top-level key written as is: name a top-level "
                "field, or have the producer put the subject id at the top level"
            )
        if problems:
            details = [
                InitErrorDetails(
                    type=PydanticCustomError("path", message),
                    loc=("fields", position, "name"),
                    input=self.fields[position].name,
                )
                for position, message in problems
            ]
            raise ValidationError.from_exception_data("AppConfig", details)

    def _check_presence(self) -> None:
        problems = presence_problems(self.fields, self.privacy.subject)
        if problems:
            details = [
                InitErrorDetails(
                    type=PydanticCustomError("presence", message),
                    loc=("fields", position, "on_missing"),
                    input=self.fields[position].on_missing,  # type: ignore[union-attr]
                )
                for position, message in problems
            ]
            raise ValidationError.from_exception_data("AppConfig", details)

    def _check_subject(self) -> None:
        kinds = {spec.name: spec.kind for spec in self.fields}
        privacy = self.privacy
        problems = subject_problems(privacy.subject, privacy.subject_public, privacy.ledger, kinds)
        details = [
            InitErrorDetails(
                type=PydanticCustomError("subject", message),
                loc=("privacy", setting),
                input=getattr(privacy, setting),
            )
            for setting, message in problems
        ]
        details += [
            InitErrorDetails(
                type=PydanticCustomError("ledger_time", message),
                loc=("privacy", "ledger", "time"),
                input=privacy.ledger.time if privacy.ledger else None,
            )
            for message in time_problems(privacy.ledger, self.fields)
        ]
        if details:
            raise ValidationError.from_exception_data("AppConfig", details)

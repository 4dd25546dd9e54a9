"""The configuration tree: frozen pydantic models, unknown keys rejected.

The config describes *what* to release. It knows nothing of Kafka clients or
of mechanism objects; ``service.pipeline.plan`` turns it into mechanisms.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from service.config.fields import Delta, Epsilon, FieldConfig, Strict


class KafkaConfig(Strict):
    """Where records come from and go to."""

    bootstrap_servers: str = "127.0.0.1:9092"
    input_topic: str = Field(min_length=1)
    output_topic: str = Field(min_length=1)
    dead_letter_topic: str = Field(min_length=1)
    group_id: str = Field(default="privstream", min_length=1)
    client_id: str = "privstream"
    max_batch_records: int = Field(default=2000, ge=1, le=100_000)
    poll_timeout_ms: int = Field(default=500, ge=1, le=60_000)

    @model_validator(mode="after")
    def _distinct_topics(self) -> KafkaConfig:
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


class HttpConfig(Strict):
    """The /metrics, /healthz and /readyz endpoint."""

    host: str = "0.0.0.0"  # noqa: S104 -- a pod's metrics port must be reachable
    port: int = Field(default=9400, ge=0, le=65535)


class AppConfig(Strict):
    """The whole privstream configuration."""

    kafka: KafkaConfig
    privacy: PrivacyConfig
    fields: tuple[FieldConfig, ...]
    http: HttpConfig = HttpConfig()

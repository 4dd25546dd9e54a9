"""The configuration tree: frozen pydantic models, unknown keys rejected.

The config describes *what* to release. It knows nothing of Kafka clients or
of mechanism objects; ``service.pipeline.plan`` turns it into mechanisms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    model_validator,
)

from service.errors import MechanismError
from service.mechanisms import validation

T = TypeVar("T")
R = TypeVar("R")


def _pydantic(check: Callable[[T], R]) -> AfterValidator:
    """Reuse a mechanisms.validation check; its message becomes the config error."""

    def run(value: T) -> R:
        try:
            return check(value)
        except MechanismError as exc:
            raise ValueError(str(exc)) from None

    return AfterValidator(run)


Epsilon = Annotated[float, _pydantic(validation.check_epsilon)]
Delta = Annotated[float, _pydantic(validation.check_delta)]
Bounds = Annotated[tuple[float, float], _pydantic(validation.check_bounds)]
DomainValue = StrictStr | StrictInt
Domain = Annotated[tuple[DomainValue, ...], _pydantic(validation.check_domain)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaConfig(_Strict):
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


class PrivacyConfig(_Strict):
    """The per-record budget that the fields' shares must fit into."""

    epsilon: Epsilon
    delta: Delta = 0.0


class _NamedField(_Strict):
    name: str = Field(min_length=1)


class DropField(_NamedField):
    """Never released: removed from the output."""

    kind: Literal["drop"]


class PublicField(_NamedField):
    """Released as is. Only for values that are not personal (a timestamp, a sequence)."""

    kind: Literal["public"]


class _NoisedField(_NamedField):
    epsilon: Epsilon
    delta: Delta = 0.0


class RealField(_NoisedField):
    """A bounded real: clamped into ``bounds`` then noised."""

    kind: Literal["real"]
    bounds: Bounds
    mechanism: Literal["laplace"] = "laplace"
    calibration: Literal["tight", "thesis"] = "tight"


class CategoricalField(_NoisedField):
    """A value from a finite, declared domain."""

    kind: Literal["categorical"]
    domain: Domain
    mechanism: Literal["randomized_response"] = "randomized_response"
    #: map a value outside the domain to this domain value instead of dead-lettering
    unknown_as: DomainValue | None = None

    @model_validator(mode="after")
    def _unknown_in_domain(self) -> CategoricalField:
        if self.unknown_as is not None and self.unknown_as not in self.domain:
            raise ValueError(
                f"unknown_as {self.unknown_as!r} is not in the domain; add it to the domain"
            )
        return self


class BooleanField(_NoisedField):
    """A JSON true/false: randomized response with m = 1."""

    kind: Literal["boolean"]
    mechanism: Literal["randomized_response"] = "randomized_response"


FieldConfig = Annotated[
    DropField | PublicField | RealField | CategoricalField | BooleanField,
    Field(discriminator="kind"),
]
NoisedField = RealField | CategoricalField | BooleanField


class HttpConfig(_Strict):
    """The /metrics, /healthz and /readyz endpoint."""

    host: str = "0.0.0.0"  # noqa: S104 -- a pod's metrics port must be reachable
    port: int = Field(default=9400, ge=0, le=65535)


class AppConfig(_Strict):
    """The whole privstream configuration."""

    kafka: KafkaConfig
    privacy: PrivacyConfig
    fields: tuple[FieldConfig, ...]
    http: HttpConfig = HttpConfig()

"""Where the writer schemas of Avro input come from: a Confluent Schema Registry."""

# no ``from __future__ import annotations``: see privstream.config.models
from pathlib import Path

from pydantic import Field, field_validator

from privstream.config.fields import Strict


class RegistryAuth(Strict):
    """HTTP basic authentication. The password is never in this file: it is read from
    ``password_file`` (e.g. a mounted Kubernetes Secret) when the worker starts."""

    username: str = Field(min_length=1)
    password_file: Path


class RegistryTls(Strict):
    """How the worker authenticates an ``https`` registry."""

    #: PEM CA bundle that signs the registry's certificate (default: the system store)
    ca_file: Path | None = None
    check_hostname: bool = True


class SchemaRegistryConfig(Strict):
    """A Confluent Schema Registry (or a server speaking its REST API)."""

    #: the API root, e.g. http://registry:8081 or an Apicurio .../apis/ccompat/v7
    url: str = Field(min_length=1)
    auth: RegistryAuth | None = None
    tls: RegistryTls = RegistryTls()
    #: how long one schema request may take before the registry counts as down
    timeout_ms: int = Field(default=5_000, ge=100, le=120_000)
    #: writer schemas kept by id (least recently used dropped first)
    cache_size: int = Field(default=1_000, ge=1, le=100_000)

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"schema_registry.url {url!r} must start with http:// or https://")
        return url.rstrip("/")

"""Avro, Protobuf and JSON Schema input: writer schemas fetched by id from the schema
registry, cached; a batch's values turned into the JSON the plan reads (the format's
module in ``privstream.pipeline``, through ``privstream.pipeline.formats``).

One registry request per schema id the cache lacks, never one per record:
ids are collected over the batch first. The cache is bounded (least
recently used dropped first) and never holds an unknown id, so a schema
registered after a record naming it was first seen is picked up by the next
batch that names it. Blocking HTTP (``urllib``): it runs in the worker's
sanitize thread, off the event loop.

A registry that does not answer (down, slow, refusing the worker) raises
``SchemaRegistryUnavailableError``: the worker drops the batch unreleased,
is not ready, and retries the session from the committed offsets (``loop``).
Only an answer that the id is unknown (HTTP 404) dead-letters a record.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from aiokafka import ConsumerRecord
from pydantic import SecretStr

from privstream.config.registry import SchemaRegistryConfig
from privstream.errors import SchemaRegistryUnavailableError, SecretError
from privstream.kafka.decode import UndecodableRecord
from privstream.pipeline.avro import Undecoded, WriterSchema, schema_id
from privstream.pipeline.formats import Codec

log = logging.getLogger("privstream.worker")
_RECORD_FIELDS = fields(ConsumerRecord)


@dataclass
class FramedRejected(UndecodableRecord):
    """A framed value that cannot be read: dead-lettered with ``problem`` and ``detail``."""

    detail: str = ""


@dataclass
class FramedDecoded(ConsumerRecord):  # type: ignore[misc]
    """A record whose ``value`` is the JSON of its framed value ``raw``, as received."""

    raw: bytes | None = None


def as_received(records: Sequence[ConsumerRecord], values: Sequence[bytes]) -> Sequence[bytes]:
    """The bytes each record's noise is keyed on: a framed record's as received, never its
    JSON (whose text a library upgrade between a crash and its replay might change)."""
    if not any(isinstance(r, FramedDecoded) for r in records):
        return values
    return [
        (r.raw or b"") if isinstance(r, FramedDecoded) else v
        for r, v in zip(records, values, strict=True)
    ]


class WriterSchemas:
    """Writer schemas of one format by id from one registry, cached."""

    def __init__(self, config: SchemaRegistryConfig, codec: Codec) -> None:
        self._config = config
        self._codec = codec
        self._cache: OrderedDict[int, WriterSchema | Undecoded] = OrderedDict()
        self._headers, self._tls = connection(config)

    def decode(self, records: Sequence[ConsumerRecord]) -> list[ConsumerRecord]:
        """The records with JSON values; those that cannot be read as ``FramedRejected``.

        Raises ``SchemaRegistryUnavailableError`` if the registry does not answer.
        """
        values = [r.value for r in records]
        ids = {sid for sid in map(schema_id, values) if sid is not None}
        decoded = self._codec.to_json(values, {sid: self.get(sid) for sid in ids})
        return [
            record
            if isinstance(record, UndecodableRecord)  # already a dead letter (its headers)
            else FramedDecoded(**_fields(record, value=value), raw=record.value)
            if isinstance(value, bytes)
            else _rejected(record, value)
            for record, value in zip(records, decoded, strict=True)
        ]

    def get(self, sid: int) -> WriterSchema | Undecoded:
        """The parsed writer schema of ``sid``, from the cache or the registry."""
        unknown = self._codec.unknown_schema_id
        cached = self._cache.get(sid)
        if cached is not None:
            self._cache.move_to_end(sid)
            return cached
        found = self._fetch(sid)
        if not (isinstance(found, Undecoded) and found.reason == unknown):
            self._cache[sid] = found
            if len(self._cache) > self._config.cache_size:
                self._cache.popitem(last=False)
        return found

    def _fetch(self, sid: int) -> WriterSchema | Undecoded:
        url = f"{self._config.url}/schemas/ids/{sid}"
        request = urllib.request.Request(url, headers=self._headers)  # noqa: S310 -- http(s) only
        try:
            with urllib.request.urlopen(  # noqa: S310 -- the config checks the scheme
                request, timeout=self._config.timeout_ms / 1000, context=self._tls
            ) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                log.warning("schema id %d is not in the registry %s", sid, self._config.url)
                return Undecoded(
                    self._codec.unknown_schema_id, f"schema id {sid} is not in the registry"
                )
            raise unavailable(url, f"HTTP {exc.code} {exc.reason}") from None
        except (OSError, ValueError) as exc:  # refused, reset, timed out, TLS, not JSON
            raise unavailable(url, f"{type(exc).__name__}: {exc}") from None
        kind, codec = body.get("schemaType", "AVRO"), self._codec
        if kind != codec.schema_type:
            why = f"schema id {sid} is {kind}, not {codec.schema_type} (kafka.format {codec.name})"
            return Undecoded(codec.unsupported_schema, why)
        log.info("fetched writer schema %d from %s", sid, self._config.url)
        return codec.parse(sid, str(body.get("schema", "")))


def connection(config: SchemaRegistryConfig) -> tuple[dict[str, str], ssl.SSLContext | None]:
    """The request headers (with the basic-auth password read now) and the TLS context."""
    headers = {"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
    if config.auth is not None:
        password = SecretStr(_read_password(config.auth.password_file))
        token = f"{config.auth.username}:{password.get_secret_value()}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
    tls: ssl.SSLContext | None = None
    if config.url.startswith("https://"):
        tls = ssl.create_default_context(cafile=config.tls.ca_file)
        tls.check_hostname = config.tls.check_hostname
    return headers, tls


def _fields(record: ConsumerRecord, **changed: object) -> dict[str, object]:
    return {f.name: changed.get(f.name, getattr(record, f.name)) for f in _RECORD_FIELDS}


def _rejected(record: ConsumerRecord, why: Undecoded) -> FramedRejected:
    return FramedRejected(**_fields(record), problem=why.reason, detail=why.detail)


def unavailable(url: str, why: str) -> SchemaRegistryUnavailableError:
    """A registry that did not answer (input schemas, or the output schema's registration)."""
    return SchemaRegistryUnavailableError(
        f"schema registry request {url} failed ({why}): retried, nothing released meanwhile, "
        "once the registry answers; check kafka.schema_registry (url, auth, tls) if it "
        "never does"
    )


def _read_password(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise SecretError(
            f"schema registry password file {path}: cannot read it ({reason})"
        ) from None

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

A writer schema registered with ``references`` (Avro named types, Protobuf
imports, JSON Schema ``$ref``s that live under other subjects) has them
fetched by subject and version, theirs too, depth first, and handed to the
format's parser in dependency order. Each subject version is one request,
kept in a cache of its own (as bounded as the ids'); at most
``MAX_REFERENCES`` per schema, ``MAX_REFERENCE_DEPTH`` deep. A reference the
registry answers 404 for dead-letters the records of that schema id
(``<format>_unknown_reference``), never cached, so a version registered
again is picked up by the next batch.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import ssl
import urllib.error
import urllib.parse
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
from privstream.pipeline.formats import Codec, Reference

log = logging.getLogger("privstream.worker")
#: references one writer schema may pull in, and how deep they may nest: a bound on the
#: requests a hostile or broken registry entry can cost (and on a cycle)
MAX_REFERENCES = 64
MAX_REFERENCE_DEPTH = 8
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
    # over the distinct types (one C loop), not a generator step per record
    if not any(issubclass(kind, FramedDecoded) for kind in set(map(type, records))):
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
        #: (subject, version) -> the registry's answer for that version
        self._versions: OrderedDict[tuple[str, str], dict[str, object]] = OrderedDict()
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
        unknown = (self._codec.unknown_schema_id, self._codec.unknown_reference)
        cached = self._cache.get(sid)
        if cached is not None:
            self._cache.move_to_end(sid)
            return cached
        found = self._fetch(sid)
        if not (isinstance(found, Undecoded) and found.reason in unknown):
            self._cache[sid] = found
            if len(self._cache) > self._config.cache_size:
                self._cache.popitem(last=False)
        return found

    def _fetch(self, sid: int) -> WriterSchema | Undecoded:
        body = self._get(f"/schemas/ids/{sid}")
        codec = self._codec
        if body is None:
            log.warning("schema id %d is not in the registry %s", sid, self._config.url)
            return Undecoded(codec.unknown_schema_id, f"schema id {sid} is not in the registry")
        wrong = self._wrong_type(body, f"schema id {sid}")
        if wrong is not None:
            return wrong
        references = self._references(sid, body)
        if isinstance(references, Undecoded):
            return references
        log.info("fetched writer schema %d from %s", sid, self._config.url)
        return codec.parse(sid, str(body.get("schema", "")), references)

    def _wrong_type(self, body: dict[str, object], what: str) -> Undecoded | None:
        kind, codec = body.get("schemaType", "AVRO"), self._codec
        if kind == codec.schema_type:
            return None
        why = f"{what} is {kind}, not {codec.schema_type} (kafka.format {codec.name})"
        return Undecoded(codec.unsupported_schema, why)

    def _references(self, sid: int, body: dict[str, object]) -> list[Reference] | Undecoded:
        """Every schema ``body`` references, directly or not, dependencies first, each once."""
        found: list[Reference] = []
        seen: dict[tuple[str, str], dict[str, object]] = {}
        pending = [(entry, 1, False) for entry in reversed(_entries(body))]
        while pending:  # depth first without recursion: (reference, depth, its own are in)
            entry, depth, expanded = pending.pop()
            key = (str(entry.get("subject")), str(entry.get("version")))
            if expanded:
                found.append((str(entry.get("name")), str(seen[key].get("schema", ""))))
                continue
            if key in seen:
                continue
            if depth > MAX_REFERENCE_DEPTH or len(seen) >= MAX_REFERENCES:
                return Undecoded(
                    self._codec.unsupported_schema,
                    f"writer schema {sid} references more than {MAX_REFERENCES} schemas or "
                    f"nests them more than {MAX_REFERENCE_DEPTH} deep",
                )
            version = self._version(*key)
            if version is None:
                return Undecoded(
                    self._codec.unknown_reference,
                    f"writer schema {sid} references version {key[1]} of subject {key[0]!r}, "
                    "which the registry does not have (deleted?)",
                )
            wrong = self._wrong_type(version, f"the reference {key[0]!r} of schema {sid}")
            if wrong is not None:
                return wrong
            seen[key] = version
            pending.append((entry, depth, True))
            pending += [(nested, depth + 1, False) for nested in reversed(_entries(version))]
        return found

    def _version(self, subject: str, version: str) -> dict[str, object] | None:
        """The registry's answer for one subject version (cached), None if it has none."""
        key = (subject, version)
        cached = self._versions.get(key)
        if cached is not None:
            self._versions.move_to_end(key)
            return cached
        quote = functools.partial(urllib.parse.quote, safe="")  # a subject may hold a "/"
        body = self._get(f"/subjects/{quote(subject)}/versions/{quote(version)}")
        if body is not None:
            self._versions[key] = body
            if len(self._versions) > self._config.cache_size:
                self._versions.popitem(last=False)
        return body

    def _get(self, path: str) -> dict[str, object] | None:
        """The registry's JSON answer for ``path``; None for HTTP 404.

        Raises ``SchemaRegistryUnavailableError`` for any other failure.
        """
        url = f"{self._config.url}{path}"
        request = urllib.request.Request(url, headers=self._headers)  # noqa: S310 -- http(s) only
        try:
            with urllib.request.urlopen(  # noqa: S310 -- the config checks the scheme
                request, timeout=self._config.timeout_ms / 1000, context=self._tls
            ) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise unavailable(url, f"HTTP {exc.code} {exc.reason}") from None
        except (OSError, ValueError) as exc:  # refused, reset, timed out, TLS, not JSON
            raise unavailable(url, f"{type(exc).__name__}: {exc}") from None
        if not isinstance(body, dict):
            raise unavailable(url, "the answer is not a JSON object")
        return body


def _entries(body: dict[str, object]) -> list[dict[str, object]]:
    """A registry answer's ``references`` (name, subject, version each)."""
    entries = body.get("references") or []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


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

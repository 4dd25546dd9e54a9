"""What the worker needs besides the YAML: secrets and its replica identity.

This is the one place that reads the environment. Secrets never come from
the config file (it is copied into ConfigMaps, tickets and logs) and never
appear in a message or a ``repr``:

* the noise key: ``--noise-key-file``, else ``PRIVSTREAM_NOISE_KEY_FILE``,
  else ``PRIVSTREAM_NOISE_KEY``; hex text of at least 32 bytes
  (``privstream keygen`` makes one);
* the broker password: ``kafka.security.password_file``, else
  ``PRIVSTREAM_KAFKA_PASSWORD``; the username from the config or
  ``PRIVSTREAM_KAFKA_USERNAME``;
* the replica id: ``--replica-id``, else ``PRIVSTREAM_REPLICA_ID``, else the
  host name (a StatefulSet pod's name, ``privstream-0``, is stable).
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from privstream.config.models import KafkaConfig
from privstream.errors import SecretError

log = logging.getLogger("privstream.config")

MIN_KEY_BYTES = 32
_HEX = re.compile(r"[0-9a-fA-F]+")
_REPLICA_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")
KEYGEN_HINT = "generate one with `privstream keygen`"


@dataclass(frozen=True)
class Credentials:
    """SASL username and password (the password is kept out of ``repr``)."""

    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class Runtime:
    """Secrets and identity of one worker process."""

    noise_secret: bytes = field(repr=False)
    replica_id: str
    credentials: Credentials | None
    #: True when the noise key is random per process (replays are not stable)
    ephemeral_key: bool = False


def keygen() -> str:
    """A fresh noise key as hex text (256 bits from the OS CSPRNG)."""
    return secrets.token_hex(MIN_KEY_BYTES)


def parse_noise_key(text: str, origin: str) -> bytes:
    """Decode a hex noise key; errors say where it came from, never what it holds."""
    key = text.strip()
    if not key:
        raise SecretError(f"{origin}: the noise key is empty; {KEYGEN_HINT}")
    if not _HEX.fullmatch(key) or len(key) % 2:
        raise SecretError(
            f"{origin}: the noise key must be hex text (an even number of 0-9a-f digits); "
            f"{KEYGEN_HINT}"
        )
    secret = bytes.fromhex(key)
    if len(secret) < MIN_KEY_BYTES:
        raise SecretError(
            f"{origin}: the noise key holds {len(secret)} bytes, at least {MIN_KEY_BYTES} "
            f"are needed; {KEYGEN_HINT}"
        )
    return secret


#: a noise key file holds 64 hex digits and a newline; a larger one is the wrong file (a
#: device, a log, a mounted directory's archive) and is not read into memory whole
MAX_KEY_FILE_BYTES = 1024


def _read_secret_file(path: Path, what: str, max_bytes: int | None = None) -> str:
    """The file's text; with ``max_bytes``, a larger file is refused unread past the limit."""
    try:
        with path.open("rb") as handle:
            data = handle.read(-1 if max_bytes is None else max_bytes + 1)
            if max_bytes is not None and len(data) > max_bytes:
                size = os.fstat(handle.fileno()).st_size  # 0 for a pipe or a device
                raise SecretError(
                    f"{what} file {path} is {_size_text(size, max_bytes)}; at most "
                    f"{max_bytes} bytes are read. Point it at the key file "
                    f"({KEYGEN_HINT}: 65 bytes)"
                )
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise SecretError(f"{what} file {path}: cannot read it ({reason})") from None


def _size_text(size: int, limit: int) -> str:
    return f"{size} bytes" if size > limit else f"larger than {limit} bytes"


#: fewer distinct bytes than this in a 32-byte key is not random: a uniform key has about
#: 30, and at most 15 with probability below 1e-15 (C(256,15) (15/256)**32)
MIN_DISTINCT_BYTES = 16


def weak_key_reason(secret: bytes) -> str | None:
    """Why ``secret`` cannot have come from a CSPRNG, or None.

    All bytes equal, few distinct bytes, or a short block repeated: a key
    typed by hand or a placeholder, which someone can guess.
    """
    distinct = len(set(secret))
    if distinct == 1:
        return f"all its {len(secret)} bytes are 0x{secret[0]:02x}"
    if distinct < MIN_DISTINCT_BYTES:
        return f"it holds only {distinct} distinct byte values"
    for period in range(1, len(secret) // 2 + 1):
        if len(secret) % period == 0 and secret == secret[:period] * (len(secret) // period):
            return f"it repeats a block of {period} bytes"
    return None


def _check_key_file_mode(path: Path) -> None:
    """WARNING when others may read the key file (or its group, needlessly)."""
    try:
        info = path.stat()
    except OSError:
        return
    world = info.st_mode & stat.S_IROTH
    # group-readable is how a Kubernetes Secret volume (root-owned, fsGroup) is read;
    # on a file this process owns, the group bit only widens who can read it
    group = info.st_mode & stat.S_IRGRP and info.st_uid == os.geteuid()
    if world or group:
        log.warning(
            "noise key file %s is readable by %s (mode %04o): whoever reads the key can "
            "recompute and subtract the noise; chmod 600 it",
            path,
            "everyone" if world else "its group",
            stat.S_IMODE(info.st_mode),
        )


def _checked(secret: bytes, origin: str) -> bytes:
    reason = weak_key_reason(secret)
    if reason is not None:
        log.warning(
            "%s: the noise key looks guessable (%s); whoever guesses it can subtract the noise: %s",
            origin,
            reason,
            KEYGEN_HINT,
        )
    return secret


def load_noise_secret(
    environ: Mapping[str, str], key_file: str | None, *, insecure_ephemeral: bool
) -> tuple[bytes, bool]:
    """The noise secret and whether it is ephemeral; SecretError when there is none.

    Warns (never refuses: a rotation must not stop the service) when the key
    file is readable by others or the key cannot have come from a CSPRNG.
    """
    path = key_file or environ.get("PRIVSTREAM_NOISE_KEY_FILE")
    if path:
        origin = f"noise key file {path}"
        text = _read_secret_file(Path(path), "noise key", MAX_KEY_FILE_BYTES)
        secret = parse_noise_key(text, origin)
        _check_key_file_mode(Path(path))
        return _checked(secret, origin), False
    if "PRIVSTREAM_NOISE_KEY" in environ:
        origin = "PRIVSTREAM_NOISE_KEY"
        return _checked(parse_noise_key(environ[origin], origin), origin), False
    if insecure_ephemeral:
        log.warning(
            "using a random noise key for this process only (--insecure-ephemeral-key): "
            "a record replayed after a restart gets fresh noise, and memoize_by fields "
            "lose their memory; never use this in production"
        )
        return secrets.token_bytes(MIN_KEY_BYTES), True
    raise SecretError(
        "no noise key: pass --noise-key-file PATH or set PRIVSTREAM_NOISE_KEY_FILE or "
        f"PRIVSTREAM_NOISE_KEY (hex, >= {MIN_KEY_BYTES} bytes; {KEYGEN_HINT}). Replayed "
        "records must get the same noise, so `run` needs a persistent key "
        "(--insecure-ephemeral-key only for experiments)"
    )


def load_credentials(kafka: KafkaConfig, environ: Mapping[str, str]) -> Credentials | None:
    """SASL credentials when the protocol needs them."""
    security = kafka.security
    if not security.uses_sasl:
        return None
    username = security.username or environ.get("PRIVSTREAM_KAFKA_USERNAME")
    if not username:
        raise SecretError(
            f"kafka.security.protocol is {security.protocol} but no username: set "
            "kafka.security.username or PRIVSTREAM_KAFKA_USERNAME"
        )
    if security.sasl_mechanism == "PLAIN" and not security.uses_tls:
        log.warning(
            "SASL PLAIN over %s sends the password of %r in clear text to anyone on the "
            "network path; use protocol SASL_SSL, or a SCRAM mechanism",
            security.protocol,
            username,
        )
    if security.password_file is not None:
        password = _read_secret_file(security.password_file, "password").rstrip("\r\n")
    elif "PRIVSTREAM_KAFKA_PASSWORD" in environ:
        password = environ["PRIVSTREAM_KAFKA_PASSWORD"]
    else:
        raise SecretError(
            f"kafka.security.protocol is {security.protocol} but no password for user "
            f"{username!r}: set kafka.security.password_file or PRIVSTREAM_KAFKA_PASSWORD"
        )
    return Credentials(username, password)


def replica_identity(environ: Mapping[str, str], replica_id: str | None) -> str:
    """A name stable across restarts of this replica and unique among live replicas."""
    chosen = replica_id or environ.get("PRIVSTREAM_REPLICA_ID") or socket.gethostname()
    if not _REPLICA_ID.fullmatch(chosen):
        raise SecretError(
            f"replica id {chosen!r} must be 1-200 characters of A-Z a-z 0-9 . _ -; "
            "set --replica-id or PRIVSTREAM_REPLICA_ID"
        )
    return chosen


def warn_insecure_tls(kafka: KafkaConfig) -> None:
    """WARNING when TLS runs without checking the broker's host name."""
    security = kafka.security
    if security.uses_tls and not security.check_hostname:
        log.warning(
            "kafka.security.check_hostname is false: any certificate the CA signed is "
            "accepted for %s, so whoever holds one can stand in for the broker and read "
            "the raw records; set check_hostname: true and put the brokers' names in "
            "their certificates",
            kafka.bootstrap_servers,
        )


def load_runtime(
    kafka: KafkaConfig,
    environ: Mapping[str, str],
    *,
    key_file: str | None = None,
    insecure_ephemeral_key: bool = False,
    replica_id: str | None = None,
) -> Runtime:
    """Everything ``privstream run`` needs from outside the config file."""
    secret, ephemeral = load_noise_secret(
        environ, key_file, insecure_ephemeral=insecure_ephemeral_key
    )
    warn_insecure_tls(kafka)
    return Runtime(
        noise_secret=secret,
        replica_id=replica_identity(environ, replica_id),
        credentials=load_credentials(kafka, environ),
        ephemeral_key=ephemeral,
    )

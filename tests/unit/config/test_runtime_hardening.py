"""Warnings about secrets an attacker could read or guess (issue 13, item 5)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
from privstream.config.models import KafkaConfig
from privstream.config.runtime import (
    MAX_KEY_FILE_BYTES,
    load_credentials,
    load_noise_secret,
    load_runtime,
    weak_key_reason,
)
from privstream.errors import SecretError

from tests.support.configs import KAFKA

#: 32 distinct bytes, no repeated block: what a CSPRNG gives (up to 1e-15)
GOOD_KEY = bytes(range(100, 132))


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def key_file(tmp_path: Path, secret: bytes, mode: int) -> Path:
    path = tmp_path / "noise.key"
    path.write_text(secret.hex() + "\n")
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("secret", "needle"),
    [
        (bytes(32), "all its 32 bytes are 0x00"),
        (b"\xab" * 40, "all its 40 bytes are 0xab"),
        (bytes(range(8)) * 4, "only 8 distinct byte values"),
        (bytes(range(20)) * 2, "repeats a block of 20 bytes"),
        (bytes(range(16, 32)) * 2, "repeats a block of 16 bytes"),
    ],
)
def test_keys_no_csprng_makes_are_named(secret: bytes, needle: str) -> None:
    reason = weak_key_reason(secret)
    assert reason is not None and needle in reason


def test_a_random_looking_key_is_fine() -> None:
    assert weak_key_reason(GOOD_KEY) is None
    assert weak_key_reason(bytes(range(32)) + b"\x00") is None  # a repeat, not a period


@pytest.mark.parametrize("origin", ["file", "env"])
def test_weak_key_warns_but_is_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, origin: str
) -> None:
    weak = bytes(32)
    if origin == "file":
        path = key_file(tmp_path, weak, 0o600)
        secret, _ = load_noise_secret({}, str(path), insecure_ephemeral=False)
    else:
        secret, _ = load_noise_secret(
            {"PRIVSTREAM_NOISE_KEY": weak.hex()}, None, insecure_ephemeral=False
        )
    assert secret == weak
    (message,) = warnings_of(caplog)
    assert "guessable" in message and "privstream keygen" in message
    assert weak.hex() not in message


@pytest.mark.parametrize(
    ("mode", "needle"),
    [(0o644, "readable by everyone (mode 0644)"), (0o604, "readable by everyone (mode 0604)")],
)
def test_world_readable_key_file_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int, needle: str
) -> None:
    path = key_file(tmp_path, GOOD_KEY, mode)
    load_noise_secret({}, str(path), insecure_ephemeral=False)
    (message,) = warnings_of(caplog)
    assert needle in message and "chmod 600" in message
    assert GOOD_KEY.hex() not in message


def test_group_bit_warns_only_on_a_file_this_process_owns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = key_file(tmp_path, GOOD_KEY, 0o640)
    assert path.stat().st_uid == os.geteuid()  # the test made it
    load_noise_secret({}, str(path), insecure_ephemeral=False)
    (message,) = warnings_of(caplog)
    assert "readable by its group (mode 0640)" in message


def test_private_key_file_is_silent(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for mode in (0o600, 0o400):
        path = key_file(tmp_path, GOOD_KEY, mode)
        load_noise_secret({}, str(path), insecure_ephemeral=False)
        path.chmod(0o600)
        path.unlink()
    assert warnings_of(caplog) == []


def kafka(**security: Any) -> KafkaConfig:
    return KafkaConfig.model_validate({**KAFKA, "security": {"username": "alice", **security}})


ENV = {"PRIVSTREAM_KAFKA_PASSWORD": "pw-CANARY"}


def test_sasl_plain_without_tls_warns(caplog: pytest.LogCaptureFixture) -> None:
    load_credentials(kafka(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN"), ENV)
    (message,) = warnings_of(caplog)
    assert "SASL PLAIN over SASL_PLAINTEXT" in message and "SASL_SSL" in message
    assert "pw-CANARY" not in message


@pytest.mark.parametrize(
    "security",
    [
        {"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"},
        {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512"},
    ],
)
def test_plain_over_tls_and_scram_are_silent(
    caplog: pytest.LogCaptureFixture, security: dict[str, str]
) -> None:
    load_credentials(kafka(**security), ENV)
    assert warnings_of(caplog) == []


# --- issue 30, item 7: a bounded key file, TLS without host name checks -------------------


def test_a_key_file_over_the_limit_is_refused_with_its_size(tmp_path: Path) -> None:
    path = tmp_path / "noise.key"
    path.write_text(GOOD_KEY.hex() + "\n" + "#" * 2000)  # a key, then anything
    path.chmod(0o600)
    with pytest.raises(SecretError) as refused:
        load_noise_secret({}, str(path), insecure_ephemeral=False)
    message = str(refused.value)
    assert f"noise key file {path} is 2065 bytes" in message
    assert f"at most {MAX_KEY_FILE_BYTES} bytes" in message
    assert GOOD_KEY.hex() not in message
    # the limit is the limit: a key padded to exactly 1 KiB is read
    path.write_text(GOOD_KEY.hex() + " " * (MAX_KEY_FILE_BYTES - 64))
    assert load_noise_secret({}, str(path), insecure_ephemeral=False)[0] == GOOD_KEY


def test_an_endless_key_file_is_refused_unread(tmp_path: Path) -> None:
    """A device (or a pipe) has no size: it is read up to the limit only."""
    with pytest.raises(SecretError, match=r"/dev/zero is larger than 1024 bytes"):
        load_noise_secret({}, "/dev/zero", insecure_ephemeral=False)


def tls(check_hostname: bool) -> KafkaConfig:
    return KafkaConfig.model_validate(
        {**KAFKA, "security": {"protocol": "SSL", "check_hostname": check_hostname}}
    )


def test_tls_without_host_name_checks_warns_at_start_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = key_file(tmp_path, GOOD_KEY, 0o600)
    load_runtime(tls(check_hostname=False), {}, key_file=str(path), replica_id="r0")
    (message,) = warnings_of(caplog)
    assert "check_hostname is false" in message and "check_hostname: true" in message
    assert "127.0.0.1:9092" in message  # the brokers it is about
    caplog.clear()
    load_runtime(tls(check_hostname=True), {}, key_file=str(path), replica_id="r0")
    assert warnings_of(caplog) == []

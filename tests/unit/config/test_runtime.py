"""Secrets and replica identity from files and the environment (privstream.config.runtime)."""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiokafka import errors as kafka_errors
from privstream.cli.main import main
from privstream.config.models import KafkaConfig
from privstream.config.runtime import (
    MIN_KEY_BYTES,
    Credentials,
    Runtime,
    keygen,
    load_runtime,
    parse_noise_key,
)
from privstream.errors import SecretError
from privstream.worker.clients import (
    consumer_options,
    final_error,
    producer_options,
    transactional_id,
)

from tests.support.configs import KAFKA

KEY_HEX = "ab" * MIN_KEY_BYTES


def kafka(**overrides: Any) -> KafkaConfig:
    return KafkaConfig.model_validate({**KAFKA, **overrides})


def sasl(tmp_path: Path, **security: Any) -> KafkaConfig:
    return kafka(security={"protocol": "SASL_SSL", **security})


# --- noise key -------------------------------------------------------------------


def test_keygen_makes_a_valid_256_bit_key_each_time() -> None:
    first, second = keygen(), keygen()
    assert first != second
    assert len(parse_noise_key(first, "x")) == MIN_KEY_BYTES


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "empty"),
        ("zz" * 32, "hex text"),
        ("abc", "hex text"),  # odd length
        ("ab" * 31, "holds 31 bytes, at least 32"),
    ],
)
def test_bad_keys_are_refused_with_the_fix(text: str, needle: str) -> None:
    with pytest.raises(SecretError, match=needle) as info:
        parse_noise_key(text, "origin-x")
    message = str(info.value)
    assert message.startswith("origin-x")
    assert "privstream keygen" in message
    if text:
        assert text not in message  # never echo what might be a secret


def test_key_file_wins_over_environment_and_whitespace_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "noise.key"
    path.write_text(f"  {KEY_HEX}\n")
    env = {"PRIVSTREAM_NOISE_KEY": "cd" * 32, "PRIVSTREAM_NOISE_KEY_FILE": "/nonexistent"}
    runtime = load_runtime(kafka(), env, key_file=str(path), replica_id="r0")
    assert runtime.noise_secret == bytes.fromhex(KEY_HEX)
    assert not runtime.ephemeral_key


def test_environment_file_then_value(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_text("cd" * 32)
    by_file = load_runtime(kafka(), {"PRIVSTREAM_NOISE_KEY_FILE": str(path)}, replica_id="r")
    assert by_file.noise_secret == bytes.fromhex("cd" * 32)
    by_value = load_runtime(kafka(), {"PRIVSTREAM_NOISE_KEY": "ef" * 40}, replica_id="r")
    assert by_value.noise_secret == bytes.fromhex("ef" * 40)


def test_no_key_is_refused_unless_ephemeral_is_asked_for() -> None:
    with pytest.raises(SecretError, match="--noise-key-file"):
        load_runtime(kafka(), {}, replica_id="r")
    runtime = load_runtime(kafka(), {}, insecure_ephemeral_key=True, replica_id="r")
    assert runtime.ephemeral_key and len(runtime.noise_secret) == MIN_KEY_BYTES


def test_unreadable_key_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.key"
    with pytest.raises(SecretError, match=f"noise key file {missing}"):
        load_runtime(kafka(), {}, key_file=str(missing), replica_id="r")


def test_secrets_stay_out_of_repr() -> None:
    runtime = Runtime(bytes(32), "r", Credentials("alice", "hunter2-secret"))
    assert "hunter2-secret" not in repr(runtime)
    assert bytes(32).hex() not in repr(runtime) and "\\x00" not in repr(runtime)


# --- replica identity ------------------------------------------------------------------


def test_replica_id_flag_then_environment_then_hostname() -> None:
    base = {"PRIVSTREAM_NOISE_KEY": KEY_HEX}
    env = {**base, "PRIVSTREAM_REPLICA_ID": "privstream-2"}
    assert load_runtime(kafka(), env, replica_id="cli-1").replica_id == "cli-1"
    assert load_runtime(kafka(), env).replica_id == "privstream-2"
    assert load_runtime(kafka(), base).replica_id  # the host name, never empty


def test_transactional_id_is_stable_for_a_replica_and_differs_between_replicas() -> None:
    config = kafka(transactional_id_prefix="ps")
    env = {"PRIVSTREAM_NOISE_KEY": KEY_HEX}
    first = transactional_id(config, load_runtime(config, env, replica_id="privstream-0"))
    again = transactional_id(config, load_runtime(config, env, replica_id="privstream-0"))
    other = transactional_id(config, load_runtime(config, env, replica_id="privstream-1"))
    assert first == again == "ps-privstream-0"
    assert other != first


def test_bad_replica_id_is_refused() -> None:
    with pytest.raises(SecretError, match="replica id"):
        load_runtime(kafka(), {"PRIVSTREAM_NOISE_KEY": KEY_HEX}, replica_id="a b/c")


# --- broker credentials ------------------------------------------------------------------


def test_sasl_password_from_file_or_environment(tmp_path: Path) -> None:
    secret_file = tmp_path / "password"
    secret_file.write_text("from-file\n")
    env = {"PRIVSTREAM_NOISE_KEY": KEY_HEX, "PRIVSTREAM_KAFKA_PASSWORD": "from-env"}
    by_file = load_runtime(sasl(tmp_path, username="alice", password_file=secret_file), env)
    assert by_file.credentials == Credentials("alice", "from-file")
    env["PRIVSTREAM_KAFKA_USERNAME"] = "bob"
    by_env = load_runtime(sasl(tmp_path), env)
    assert by_env.credentials == Credentials("bob", "from-env")


def test_sasl_without_username_or_password_says_where_to_put_them(tmp_path: Path) -> None:
    env = {"PRIVSTREAM_NOISE_KEY": KEY_HEX}
    with pytest.raises(SecretError, match="PRIVSTREAM_KAFKA_USERNAME"):
        load_runtime(sasl(tmp_path), env)
    with pytest.raises(SecretError, match="no password for user 'alice'"):
        load_runtime(sasl(tmp_path, username="alice"), env)


def test_plaintext_needs_no_credentials() -> None:
    runtime = load_runtime(kafka(), {"PRIVSTREAM_NOISE_KEY": KEY_HEX}, replica_id="r")
    assert runtime.credentials is None


def test_security_config_consistency_checks() -> None:
    with pytest.raises(ValueError, match="cert_file and key_file go together"):
        kafka(security={"protocol": "SSL", "cert_file": "/c.pem"})
    with pytest.raises(ValueError, match="use SSL or SASL_SSL"):
        kafka(security={"protocol": "SASL_PLAINTEXT", "ca_file": "/ca.pem"})


# --- client options and final errors ------------------------------------------------------


def runtime_for(config: KafkaConfig) -> Runtime:
    credentials = Credentials("alice", "pw") if config.security.uses_sasl else None
    return Runtime(bytes(32), "r0", credentials)


def test_client_options_carry_exactly_once_and_bounded_memory_settings() -> None:
    config = kafka(max_batch_bytes=4 * 2**20, transaction_timeout_ms=9000)
    runtime = runtime_for(config)
    consumer = consumer_options(config, runtime)
    producer = producer_options(config, runtime)
    assert consumer["isolation_level"] == "read_committed"
    assert consumer["enable_auto_commit"] is False
    assert consumer["fetch_max_bytes"] == 4 * 2**20
    assert producer["transactional_id"] == "privstream-r0"
    assert producer["transaction_timeout_ms"] == 9000
    assert producer["acks"] == "all"
    no_txn = producer_options(kafka(transactions=False), runtime)
    assert "transactional_id" not in no_txn


def test_sasl_ssl_options(tmp_path: Path) -> None:
    config = sasl(tmp_path, username="alice", check_hostname=False)
    options = consumer_options(config, runtime_for(config))
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "alice"
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].check_hostname is False


@pytest.mark.parametrize(
    ("exc", "needle"),
    [
        (kafka_errors.AuthenticationFailedError(), "refused authentication for user 'alice'"),
        (kafka_errors.ProducerFenced(), "own --replica-id"),
        (kafka_errors.TopicAuthorizationFailedError(), "grant ACLs"),
        (kafka_errors.UnsupportedSaslMechanismError(), "sasl_mechanism"),
    ],
)
def test_final_errors_name_the_fix(tmp_path: Path, exc: Exception, needle: str) -> None:
    config = sasl(tmp_path, username="alice")
    final = final_error(exc, config, runtime_for(config))
    assert final is not None and needle in str(final)
    assert "pw" not in str(final).split()


def test_final_error_is_found_in_the_cause_chain(tmp_path: Path) -> None:
    config = sasl(tmp_path, username="alice")
    try:
        try:
            raise kafka_errors.AuthenticationFailedError()
        except kafka_errors.AuthenticationFailedError as inner:
            raise kafka_errors.KafkaConnectionError("bootstrap failed") from inner
    except kafka_errors.KafkaConnectionError as outer:
        assert final_error(outer, config, runtime_for(config)) is not None


def test_retriable_errors_are_not_final() -> None:
    config = kafka()
    for exc in (kafka_errors.KafkaConnectionError(), kafka_errors.RequestTimedOutError()):
        assert final_error(exc, config, runtime_for(config)) is None


# --- CLI -----------------------------------------------------------------------------------


def test_cli_run_without_a_key_exits_2_and_explains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "kafka: {input_topic: a, output_topic: b, dead_letter_topic: c}\n"
        "privacy: {epsilon: 1}\nfields: [{name: n, kind: public}]\n"
    )
    assert main(["run", "--config", str(config)]) == 2
    assert "privstream keygen" in capsys.readouterr().err


def test_cli_keygen_prints_a_usable_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keygen"]) == 0
    assert len(parse_noise_key(capsys.readouterr().out, "stdout")) == MIN_KEY_BYTES


def test_building_the_cli_imports_neither_scipy_nor_matplotlib() -> None:
    """`run` starts in well under a second: audit/estimate import their heavy deps lazily."""
    code = (
        "import sys; from privstream.cli.main import _parser; _parser(); "
        "heavy = [m for m in ('scipy', 'matplotlib') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

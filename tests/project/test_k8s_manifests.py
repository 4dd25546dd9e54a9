"""The Kubernetes manifests in deploy/k8s/, checked offline.

Built-in kinds are validated strictly (unknown keys are errors) against the
Kubernetes OpenAPI schemas that the ``kubernetes-validate`` package bundles, so
no cluster and no network are needed. ServiceMonitor, ScaledObject and
TriggerAuthentication are CRDs without a bundled schema: their structure is
checked here by hand. Then the resources are checked against each other and
against what the worker does: the shipped config, the ports and paths it
serves, the files it reads, the drain on SIGTERM, the image's user.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions
from privstream.config import AppConfig, parse_config
from privstream.config.runtime import Runtime, parse_noise_key, replica_identity
from privstream.errors import SecretError
from privstream.kinds import build_plan
from privstream.worker.clients import transactional_id

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"

#: the oldest Kubernetes release the manifests claim to support, and the newest
#: schema kubernetes-validate 1.37 bundles; both are validated strictly
K8S_VERSIONS = ("1.31.0", "1.37.0")
#: partitions of the input topic (telemetry.raw): more replicas would sit idle
INPUT_PARTITIONS = 4
#: files deliberately left out of kustomization.yaml
NOT_IN_BASE = {"secrets.example.yaml", "hpa-alternative.yaml"}
CRDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
}
NAMESPACE = "privstream"
METRICS_PORT = 9400
#: kafka.security.sasl_mechanism -> the KEDA kafka scaler's `sasl` value
KEDA_SASL = {"SCRAM-SHA-256": "scram_sha256", "SCRAM-SHA-512": "scram_sha512", "PLAIN": "plaintext"}


def _load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def _manifest_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


MANIFESTS: list[tuple[str, dict[str, Any]]] = [
    (path.name, doc) for path in _manifest_files() for doc in _load(path)
]
BUILTIN = [(f, d) for f, d in MANIFESTS if (d["apiVersion"], d["kind"]) not in CRDS]


def _one(kind: str, name: str | None = None, file: str | None = None) -> dict[str, Any]:
    found = [
        d
        for f, d in MANIFESTS
        if d["kind"] == kind
        and (name is None or d["metadata"]["name"] == name)
        and (file is None or f == file)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _all(kind: str) -> list[dict[str, Any]]:
    return [d for _, d in MANIFESTS if d["kind"] == kind]


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.fixture(scope="module")
def sts() -> dict[str, Any]:
    return _one("StatefulSet", "privstream")


@pytest.fixture(scope="module")
def pod(sts: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = sts["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def container(pod: dict[str, Any]) -> dict[str, Any]:
    containers = pod["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


@pytest.fixture(scope="module")
def pod_labels(sts: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = sts["spec"]["template"]["metadata"]["labels"]
    return labels


@pytest.fixture(scope="module")
def config() -> AppConfig:
    data = _one("ConfigMap", "privstream-config")["data"]["config.yaml"]
    return parse_config(yaml.safe_load(data))


def _container_port(container: dict[str, Any], port: int | str) -> int:
    """A probe's or Service's port: a number, or the name of a container port."""
    if isinstance(port, int):
        return port
    matches = [p["containerPort"] for p in container["ports"] if p["name"] == port]
    assert len(matches) == 1, f"no container port named {port}"
    number: int = matches[0]
    return number


def _mounted_files(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Every file the container sees from a ConfigMap or Secret: path -> (source, key)."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    files: dict[str, tuple[str, str]] = {}
    for mount in container["volumeMounts"]:
        assert "subPath" not in mount  # subPath mounts never see a rotated Secret
        volume = volumes[mount["name"]]
        sources: list[tuple[str, dict[str, Any]]] = []
        if "configMap" in volume:
            sources.append(("configmap", volume["configMap"]))
        if "secret" in volume:
            sources.append(("secret", {**volume["secret"], "name": volume["secret"]["secretName"]}))
        sources.extend(
            (kind.lower(), source[kind])
            for source in volume.get("projected", {}).get("sources", [])
            for kind in ("configMap", "secret")
            if kind in source
        )
        for kind, source in sources:
            for item in source["items"]:  # explicit items: no surprise files
                path = str(PurePosixPath(mount["mountPath"]) / item["path"])
                files[path] = (f"{kind}/{source['name']}", item["key"])
    return files


def _arg(container: dict[str, Any], flag: str) -> str:
    args: list[str] = container["args"]
    assert args.count(flag) == 1, f"{flag} must be given once"
    return args[args.index(flag) + 1]


# --- schemas -------------------------------------------------------------------


def test_every_manifest_is_validated_or_a_known_crd() -> None:
    assert BUILTIN, "no manifests found"
    kinds = {(d["apiVersion"], d["kind"]) for _, d in MANIFESTS}
    assert kinds & CRDS == CRDS  # the hand-made CRD checks below have something to check
    for _, doc in MANIFESTS:
        if (doc["apiVersion"], doc["kind"]) in CRDS:
            # no bundled schema for CRDs: that is why they are checked by hand
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_the_pinned_schemas_are_bundled() -> None:
    """No download at test time: the versions are in the installed package."""
    bundled = set(all_versions())
    assert set(K8S_VERSIONS) <= bundled


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(
    "doc",
    [d for _, d in BUILTIN],
    ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in BUILTIN],
)
def test_builtin_kinds_validate_strictly(doc: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize(
    "mutation",
    [
        lambda c: c.update(readOnlyRootFileSystem=True),  # misspelt key
        lambda c: c["ports"][0].update(containerPort="9400"),  # wrong type
        lambda c: c.pop("name"),  # required key
    ],
)
def test_strict_validation_is_not_vacuous(sts: dict[str, Any], mutation: Any) -> None:
    broken = copy.deepcopy(sts)
    mutation(broken["spec"]["template"]["spec"]["containers"][0])
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)


def test_crds_have_their_required_structure() -> None:
    for doc in [*_all("ServiceMonitor"), *_all("ScaledObject"), *_all("TriggerAuthentication")]:
        assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
        assert (doc["apiVersion"], doc["kind"]) in CRDS
        assert doc["metadata"]["namespace"] == NAMESPACE
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])


# --- kustomization ---------------------------------------------------------------


def test_kustomization_lists_the_base_without_the_alternatives() -> None:
    (kustomization,) = _load(K8S / "kustomization.yaml")
    assert kustomization["kind"] == "Kustomization"
    assert kustomization["namespace"] == NAMESPACE
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    expected = {p.name for p in _manifest_files()} - NOT_IN_BASE
    assert set(listed) == expected
    assert {p.name for p in _manifest_files()} >= NOT_IN_BASE
    # applied with -f too, every namespaced resource names its namespace
    for file, doc in MANIFESTS:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == NAMESPACE, file


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomize_builds_the_base() -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    built = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out) if d}
    base = {(d["kind"], d["metadata"]["name"]) for f, d in MANIFESTS if f not in NOT_IN_BASE}
    assert built == base
    assert ("HorizontalPodAutoscaler", "privstream") not in built
    assert not any(kind == "Secret" for kind, _ in built)


def test_image_tag_is_pinned(container: dict[str, Any]) -> None:
    (kustomization,) = _load(K8S / "kustomization.yaml")
    name, _, tag = container["image"].partition(":")
    assert tag and tag != "latest"
    assert kustomization["images"] == [{"name": name, "newTag": tag}]


# --- the shipped config ------------------------------------------------------------


def test_the_configmap_config_is_valid(config: AppConfig) -> None:
    plan = build_plan(config)  # every mechanism accepts its parameters
    assert plan.epsilon <= config.privacy.epsilon * (1 + 1e-9)
    assert config.kafka.transactions  # exactly-once is what the StatefulSet is for
    assert config.http.host == "0.0.0.0"  # noqa: S104 -- reachable from Prometheus and probes
    assert config.http.port == METRICS_PORT


def test_the_config_is_where_the_worker_reads_it(
    pod: dict[str, Any], container: dict[str, Any]
) -> None:
    assert "command" not in container  # the image's ENTRYPOINT ["privstream"] stays
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert 'ENTRYPOINT ["privstream"]' in dockerfile
    assert container["args"][0] == "run"
    files = _mounted_files(pod, container)
    assert files[_arg(container, "--config")] == ("configmap/privstream-config", "config.yaml")


# --- identity: why a StatefulSet ------------------------------------------------------


def test_each_replica_has_a_stable_unique_transactional_id(
    sts: dict[str, Any], container: dict[str, Any], config: AppConfig
) -> None:
    env = {e["name"]: e for e in container["env"]}
    assert env["PRIVSTREAM_REPLICA_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    ids = replica_transactional_ids(config, sts["metadata"]["name"])
    assert ids == {f"privstream-privstream-{i}" for i in range(INPUT_PARTITIONS)}


def replica_transactional_ids(config: AppConfig, name: str) -> set[str]:
    """The transactional id of each replica of a StatefulSet named ``name`` (pod names
    ``<name>-<ordinal>``, read through PRIVSTREAM_REPLICA_ID)."""
    return {
        transactional_id(
            config.kafka,
            Runtime(
                noise_secret=b"k" * 32,
                replica_id=replica_identity({"PRIVSTREAM_REPLICA_ID": f"{name}-{i}"}, None),
                credentials=None,
            ),
        )
        for i in range(INPUT_PARTITIONS)
    }


def test_the_statefulset_is_governed_by_a_headless_service(sts: dict[str, Any]) -> None:
    headless = _one("Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    # the autoscaler owns the replica count; re-applying must not reset it
    assert "replicas" not in sts["spec"]


# --- labels and selectors ---------------------------------------------------------------


def test_selectors_match_the_pod_labels(sts: dict[str, Any], pod_labels: dict[str, str]) -> None:
    assert _selects(sts["spec"]["selector"]["matchLabels"], pod_labels)
    for service in _all("Service"):
        assert _selects(service["spec"]["selector"], pod_labels), service["metadata"]["name"]
    pdb = _one("PodDisruptionBudget", "privstream")
    assert _selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    policy = _one("NetworkPolicy", "privstream")
    assert _selects(policy["spec"]["podSelector"]["matchLabels"], pod_labels)
    for constraint in sts["spec"]["template"]["spec"]["topologySpreadConstraints"]:
        assert _selects(constraint["labelSelector"]["matchLabels"], pod_labels)


def test_pod_disruption_budget_takes_one_worker_at_a_time() -> None:
    pdb = _one("PodDisruptionBudget", "privstream")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "minAvailable" not in pdb["spec"]


# --- probes, ports, termination -------------------------------------------------------


def test_probes_hit_the_worker_endpoints(container: dict[str, Any]) -> None:
    expected = {
        "startupProbe": "/healthz",
        "livenessProbe": "/healthz",
        "readinessProbe": "/readyz",
    }
    for probe, path in expected.items():
        get = container[probe]["httpGet"]
        assert get["path"] == path, probe
        assert _container_port(container, get["port"]) == METRICS_PORT, probe
    assert [p["containerPort"] for p in container["ports"]] == [METRICS_PORT]


def test_grace_period_outlasts_the_drain(pod: dict[str, Any], config: AppConfig) -> None:
    grace = pod["terminationGracePeriodSeconds"]
    drain = config.kafka.drain_timeout_ms / 1000
    assert grace > drain
    assert grace - drain >= 10  # time to abort/close the clients after the drain


def test_resources_are_set(container: dict[str, Any]) -> None:
    resources = container["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"])
    assert "memory" in resources["limits"]


#: docs/deployment.md "Memory limit with a ledger": base + bytes a pair x pairs, rounded up
MEMORY_BASE_MIB = 192
MEMORY_BYTES_PER_PAIR = 256
MEMORY_STEP_MIB = 64


#: the formula as docs/deployment.md states it (its text block: ``test_docs``)
MEMORY_FORMULA = (
    f"limit = {MEMORY_BASE_MIB} MiB + {MEMORY_BYTES_PER_PAIR} bytes x P, rounded up to a "
    f"multiple of {MEMORY_STEP_MIB} MiB"
)


def memory_limit_mib(pairs: int) -> int:
    needed = MEMORY_BASE_MIB * 2**20 + MEMORY_BYTES_PER_PAIR * pairs
    return -(-needed // (MEMORY_STEP_MIB * 2**20)) * MEMORY_STEP_MIB


def test_memory_limit_follows_the_documented_formula(
    sts: dict[str, Any], container: dict[str, Any]
) -> None:
    pairs = int(sts["metadata"]["annotations"]["privstream.dev/ledger-pairs"])
    limits, requests = container["resources"]["limits"], container["resources"]["requests"]
    assert limits["memory"] == f"{memory_limit_mib(pairs)}Mi"
    assert int(requests["memory"].removesuffix("Mi")) <= memory_limit_mib(pairs)
    docs = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    assert MEMORY_FORMULA in docs  # the constants here are the documented ones
    assert f"a limit of {memory_limit_mib(pairs)}Mi" in docs
    assert memory_limit_mib(0) == 192 and memory_limit_mib(1_000_000) == 448  # 436 MiB up


# --- secrets -------------------------------------------------------------------------------


def test_secret_files_are_mounted_where_the_worker_reads_them(
    pod: dict[str, Any], container: dict[str, Any], config: AppConfig
) -> None:
    files = _mounted_files(pod, container)
    key_file = _arg(container, "--noise-key-file")
    assert key_file == "/var/run/secrets/privstream/noise-key"
    assert files[key_file] == ("secret/privstream-noise-key", "noise-key")
    security = config.kafka.security
    assert security.uses_sasl and security.uses_tls
    assert security.password_file is not None and security.ca_file is not None
    assert files[str(security.password_file)] == ("secret/privstream-kafka", "password")
    assert files[str(security.ca_file)] == ("secret/privstream-kafka", "ca.crt")
    env = {e["name"]: e for e in container["env"]}
    assert security.username is None
    assert env["PRIVSTREAM_KAFKA_USERNAME"]["valueFrom"]["secretKeyRef"] == {
        "name": "privstream-kafka",
        "key": "username",
    }
    # no secret in an environment variable value, no secret in the config
    assert "PRIVSTREAM_NOISE_KEY" not in env and "PRIVSTREAM_KAFKA_PASSWORD" not in env


def test_every_referenced_secret_key_is_documented(
    pod: dict[str, Any], container: dict[str, Any]
) -> None:
    documented = {
        (s["metadata"]["name"], key)
        for f, s in MANIFESTS
        if s["kind"] == "Secret"
        for key in s["stringData"]
    }
    referenced = {
        (source.removeprefix("secret/"), key)
        for source, key in _mounted_files(pod, container).values()
        if source.startswith("secret/")
    }
    referenced |= {
        (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for e in container["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    auth = _one("TriggerAuthentication", "privstream-kafka")
    referenced |= {(r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert referenced <= documented


def test_no_real_secret_is_in_the_repo() -> None:
    example = _one("Secret", "privstream-noise-key", file="secrets.example.yaml")
    with pytest.raises(SecretError):  # applied unchanged, the worker refuses to start
        parse_noise_key(example["stringData"]["noise-key"], "example")
    for file, doc in MANIFESTS:
        if doc["kind"] == "Secret":
            assert file == "secrets.example.yaml"
            assert "data" not in doc  # base64 could hide a real value
            assert all("REPLACE-ME" in v for k, v in doc["stringData"].items() if k != "username")
    for path in K8S.iterdir():
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"[0-9a-fA-F]{64}", text), path.name  # a keygen output
        assert "BEGIN PRIVATE KEY" not in text, path.name


# --- security context -------------------------------------------------------------------


def test_runs_non_root_read_only_without_privileges(
    pod: dict[str, Any], container: dict[str, Any]
) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    # the image's final USER uid[:gid]
    image_uid, _, image_gid = re.findall(r"^USER (\d+(?::\d+)?)\s*$", dockerfile, re.M)[
        -1
    ].partition(":")
    pod_sc, sc = pod["securityContext"], container["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and sc["runAsNonRoot"] is True
    assert pod_sc["runAsUser"] == sc["runAsUser"] == int(image_uid)
    if image_gid:
        assert pod_sc["runAsGroup"] == int(image_gid)
    assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in sc and "add" not in sc["capabilities"]
    assert pod["automountServiceAccountToken"] is False
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    volumes = {v["name"]: v for v in pod["volumes"]}
    tmp = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert len(tmp) == 1 and "emptyDir" in volumes[tmp[0]["name"]]
    for mount in container["volumeMounts"]:
        if mount["mountPath"] != "/tmp":
            assert mount["readOnly"] is True, mount["name"]
    secrets = [v for v in pod["volumes"] if "projected" in v or "secret" in v]
    assert all(v.get("projected", v.get("secret"))["defaultMode"] == 0o440 for v in secrets)
    namespace = _one("Namespace", NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


# --- network --------------------------------------------------------------------------------


def test_network_policy_admits_prometheus_to_the_metrics_port_only(
    container: dict[str, Any],
) -> None:
    spec = _one("NetworkPolicy", "privstream")["spec"]
    assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": METRICS_PORT}]
    assert rule["ports"][0]["port"] == _container_port(container, "metrics")
    (peer,) = rule["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
    assert peer["podSelector"]["matchLabels"]  # Prometheus pods, not the whole namespace


def test_network_policy_lets_out_kafka_and_dns_only(config: AppConfig) -> None:
    egress = _one("NetworkPolicy", "privstream")["spec"]["egress"]
    assert len(egress) == 2
    for rule in egress:
        assert rule.get("to") and rule.get("ports")  # an empty list would allow everything
    kafka, dns = egress
    (kafka_peer,) = kafka["to"]
    assert kafka_peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "kafka"
    }
    allowed = {(p["protocol"], p["port"]) for p in kafka["ports"]}
    bootstrap = {int(s.rsplit(":", 1)[1]) for s in config.kafka.bootstrap_servers.split(",")}
    assert allowed == {("TCP", port) for port in bootstrap}
    assert allowed <= {("TCP", 9092), ("TCP", 9093)}
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}
    (dns_peer,) = dns["to"]
    assert dns_peer["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}


# --- metrics ------------------------------------------------------------------------------


def test_service_monitor_scrapes_the_metrics_service(container: dict[str, Any]) -> None:
    monitor = _one("ServiceMonitor", "privstream")
    spec = monitor["spec"]
    assert NAMESPACE in spec["namespaceSelector"]["matchNames"]
    selected = [
        s
        for s in _all("Service")
        if _selects(spec["selector"]["matchLabels"], s["metadata"]["labels"])
    ]
    assert [s["metadata"]["name"] for s in selected] == ["privstream-metrics"]  # scraped once
    (service,) = selected
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    (endpoint,) = spec["endpoints"]
    assert endpoint["path"] == "/metrics"
    port = ports[endpoint["port"]]
    assert _container_port(container, port["targetPort"]) == METRICS_PORT
    # a worker whose broker is down fails /readyz, and must still be scraped then
    assert service["spec"]["publishNotReadyAddresses"] is True


# --- scaling ------------------------------------------------------------------------------------


def test_scaled_object_scales_the_statefulset_on_the_group_lag(
    sts: dict[str, Any], config: AppConfig
) -> None:
    spec = _one("ScaledObject", "privstream")["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": sts["metadata"]["name"],
    }
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"] <= INPUT_PARTITIONS
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "kafka"
    meta = trigger["metadata"]
    assert all(isinstance(v, str) for v in meta.values())  # KEDA's metadata is map[string]string
    assert meta["bootstrapServers"] == config.kafka.bootstrap_servers
    assert meta["consumerGroup"] == config.kafka.group_id
    assert meta["topic"] == config.kafka.input_topic
    assert int(meta["lagThreshold"]) > 0
    assert meta["allowIdleConsumers"] == "false"
    assert meta["offsetResetPolicy"] == "earliest"  # the worker's auto_offset_reset
    security = config.kafka.security
    assert meta["sasl"] == KEDA_SASL[security.sasl_mechanism]
    assert meta["tls"] == ("enable" if security.uses_tls else "disable")
    auth = _one("TriggerAuthentication", trigger["authenticationRef"]["name"])
    assert {r["parameter"] for r in auth["spec"]["secretTargetRef"]} == {
        "username",
        "password",
        "ca",
    }


def test_hpa_alternative_matches_the_scaled_object(sts: dict[str, Any]) -> None:
    hpa = _one("HorizontalPodAutoscaler", "privstream", file="hpa-alternative.yaml")
    scaled = _one("ScaledObject", "privstream")["spec"]
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == scaled["scaleTargetRef"]
    assert spec["scaleTargetRef"]["name"] == sts["metadata"]["name"]
    assert spec["minReplicas"] == scaled["minReplicaCount"]
    assert spec["maxReplicas"] == scaled["maxReplicaCount"] <= INPUT_PARTITIONS
    (metric,) = spec["metrics"]
    assert metric["external"]["metric"]["name"] == "privstream_consumer_lag_records"
    assert (
        metric["external"]["target"]["averageValue"]
        == scaled["triggers"][0]["metadata"]["lagThreshold"]
    )
    assert spec["behavior"] == scaled["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    text = (K8S / "hpa-alternative.yaml").read_text(encoding="utf-8")
    assert "Apply only one of the two" in text


def test_the_scrape_job_is_the_one_the_alerting_rules_select() -> None:
    """The operator names the job after the Service; the rules expect job="privstream"."""
    (monitor,) = _load(K8S / "servicemonitor.yaml")
    (endpoint,) = monitor["spec"]["endpoints"]
    relabel = {r["targetLabel"]: r for r in endpoint["relabelings"]}
    assert relabel["job"]["replacement"] == "privstream"
    rules = (ROOT / "deploy" / "prometheus" / "rules.yml").read_text()
    assert 'up{job="privstream"}' in rules

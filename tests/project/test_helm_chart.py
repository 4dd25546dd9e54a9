"""The Helm chart in deploy/helm/privstream, checked offline with a real Helm binary.

``make helm`` builds Helm from its Go module into build/tools (the version is the
Makefile's HELM_VERSION). ``helm lint --strict`` runs on the chart; ``helm template``'s
output is validated like deploy/k8s/: built-in kinds strictly against the Kubernetes
1.31 and 1.37 schemas, the CRDs by structure. The chart's defaults must render the
worker of deploy/k8s/: the privacy-relevant settings of the two workloads are compared
(config, transactional id scheme, probes, resources, secret mounts, security context),
so a change to one that is not made to the other fails here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import privstream
import pytest
import yaml
from privstream.config import parse_config

from tests.project.test_k8s_manifests import (
    CRDS,
    INPUT_PARTITIONS,
    K8S_VERSIONS,
    MANIFESTS,
    _mounted_files,
    memory_limit_mib,
    replica_transactional_ids,
)

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "privstream"
_MAKE_HELM = re.search(r"^HELM_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.M)
assert _MAKE_HELM is not None
HELM = ROOT / "build" / "tools" / f"helm-{_MAKE_HELM.group(1)}" / "helm"
RELEASE, NAMESPACE = "privstream", "privstream"
SELECTOR = {
    "app.kubernetes.io/name": "privstream",
    "app.kubernetes.io/instance": RELEASE,
    "app.kubernetes.io/component": "worker",
}


def _helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM.exists(), f"{HELM} is missing: `make helm` builds it"
    return subprocess.run(
        [str(HELM), *args], capture_output=True, text=True, timeout=120, check=False
    )


def _template(sets: tuple[str, ...], kube: str) -> subprocess.CompletedProcess[str]:
    flags = [f for s in sets for f in ("--set", s)]
    return _helm(
        "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube, *flags
    )


def _render(*sets: str, kube: str = K8S_VERSIONS[0]) -> list[dict[str, Any]]:
    done = _template(sets, kube)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _kustomize(kind: str) -> dict[str, Any]:
    (doc,) = [d for f, d in MANIFESTS if d["kind"] == kind and f != "hpa-alternative.yaml"]
    return doc


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return _render()


@pytest.fixture(scope="module")
def sts(rendered: list[dict[str, Any]]) -> dict[str, Any]:
    return _one(rendered, "StatefulSet")


def test_helm_lint_is_clean() -> None:
    done = _helm("lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def test_the_chart_refuses_a_kubernetes_older_than_the_schemas_tested() -> None:
    done = _template((), "1.30.0")
    assert done.returncode != 0
    assert "kubeVersion" in done.stderr


def test_the_defaults_render_every_resource(rendered: list[dict[str, Any]]) -> None:
    kinds = sorted(d["kind"] for d in rendered)
    assert kinds == sorted(
        [
            "ServiceAccount",
            "ConfigMap",
            "Service",
            "Service",
            "StatefulSet",
            "PodDisruptionBudget",
            "NetworkPolicy",
            "ServiceMonitor",
            "ScaledObject",
            "TriggerAuthentication",
        ]
    )
    assert not any(d["kind"] == "Secret" for d in rendered)  # referenced, never created
    # the same resources, by kind and name, as the kustomize base
    base = {(d["kind"], d["metadata"]["name"]) for f, d in MANIFESTS}
    assert {(d["kind"], d["metadata"]["name"]) for d in rendered} <= base
    for doc in rendered:
        assert doc["metadata"]["namespace"] == NAMESPACE


VARIANTS = {
    "defaults": (),
    "no-optional": (
        "keda.enabled=false",
        "serviceMonitor.enabled=false",
        "networkPolicy.enabled=false",
        "podDisruptionBudget.enabled=false",
    ),
    "deployment": ("workload.kind=Deployment",),  # the generation fences zombies
    "deployment-plaintext": (
        "workload.kind=Deployment",
        "config.kafka.security=null",
        "config.kafka.bootstrap_servers=kafka.kafka.svc:9092",
        "networkPolicy.kafka.ports={9092}",
    ),
}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_rendered_builtin_kinds_validate_strictly(variant: str, version: str) -> None:
    docs = _render(*VARIANTS[variant], kube=version)
    builtin = [d for d in docs if (d["apiVersion"], d["kind"]) not in CRDS]
    assert builtin
    for doc in builtin:
        kubernetes_validate.validate(doc, version, strict=True)
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CRDS:
            assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}


def test_without_keda_the_chart_sets_the_replicas() -> None:
    docs = _render("keda.enabled=false", "workload.replicas=3")
    assert _one(docs, "StatefulSet")["spec"]["replicas"] == 3
    assert not any(d["kind"] in {"ScaledObject", "TriggerAuthentication"} for d in docs)


def test_the_workload_kind_follows_the_value_and_keda_targets_it() -> None:
    docs = _render(*VARIANTS["deployment-plaintext"])
    deployment = _one(docs, "Deployment")
    assert "serviceName" not in deployment["spec"]
    assert _one(docs, "ScaledObject")["spec"]["scaleTargetRef"]["kind"] == "Deployment"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "PRIVSTREAM_KAFKA_USERNAME" not in {e["name"] for e in container["env"]}
    assert not any(d["kind"] == "TriggerAuthentication" for d in docs)  # PLAINTEXT


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("workload.kind=DaemonSet",), "'/workload/kind': value must be one of"),  # the schema
        (("ledgerPairz=1",), "additional properties 'ledgerPairz' not allowed"),  # a typo
        (("config.http.host=127.0.0.1",), "'/config/http/host': value must be '0.0.0.0'"),
        (("image.tag=latest",), "/image/tag"),
        (("workload.terminationGracePeriodSeconds=35",), "drain_timeout_ms + 10 s"),
        (("config.kafka.security.ca_file=/etc/ca.crt",), "config.kafka.security.ca_file"),
    ],
)
def test_unsafe_values_are_refused(sets: tuple[str, ...], message: str) -> None:
    done = _template(sets, K8S_VERSIONS[0])
    assert done.returncode != 0
    assert message in done.stderr


# --- the chart's worker is the kustomize worker ------------------------------------------


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = container
    return result


def test_the_config_is_the_kustomize_config(rendered: list[dict[str, Any]]) -> None:
    chart = parse_config(yaml.safe_load(_one(rendered, "ConfigMap")["data"]["config.yaml"]))
    kustomize = parse_config(
        yaml.safe_load(_kustomize("ConfigMap")["data"]["config.yaml"]),
    )
    assert chart == kustomize


def test_privacy_relevant_workload_settings_match_kustomize(sts: dict[str, Any]) -> None:
    theirs = _kustomize("StatefulSet")
    ours_pod, their_pod = sts["spec"]["template"]["spec"], theirs["spec"]["template"]["spec"]
    ours_c, their_c = _container(sts), _container(theirs)
    # identity: pod names <name>-<ordinal> and the replica id from the pod name
    assert sts["metadata"]["name"] == theirs["metadata"]["name"]
    assert sts["spec"]["serviceName"] == theirs["spec"]["serviceName"]
    assert sts["spec"]["podManagementPolicy"] == theirs["spec"]["podManagementPolicy"]
    assert "replicas" not in sts["spec"] and "replicas" not in theirs["spec"]
    assert ours_c["env"] == their_c["env"]
    assert ours_c["args"] == their_c["args"]
    assert ours_c["ports"] == their_c["ports"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert ours_c[probe] == their_c[probe], probe
    assert ours_c["resources"] == their_c["resources"]
    assert ours_c["securityContext"] == their_c["securityContext"]
    assert ours_pod["securityContext"] == their_pod["securityContext"]
    for key in ("terminationGracePeriodSeconds", "automountServiceAccountToken"):
        assert ours_pod[key] == their_pod[key], key
    assert _mounted_files(ours_pod, ours_c) == _mounted_files(their_pod, their_c)
    assert ours_pod["volumes"] == their_pod["volumes"]
    ledger = "privstream.dev/ledger-pairs"
    assert sts["metadata"]["annotations"][ledger] == theirs["metadata"]["annotations"][ledger]
    assert sts["spec"]["selector"]["matchLabels"] == SELECTOR
    assert theirs["spec"]["selector"]["matchLabels"] == SELECTOR


def test_each_replica_has_the_kustomize_transactional_id(
    rendered: list[dict[str, Any]], sts: dict[str, Any]
) -> None:
    """Pod names <name>-<ordinal> through PRIVSTREAM_REPLICA_ID: stable and unique."""
    config = parse_config(yaml.safe_load(_one(rendered, "ConfigMap")["data"]["config.yaml"]))
    env = {e["name"]: e for e in _container(sts)["env"]}
    assert env["PRIVSTREAM_REPLICA_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    ids = replica_transactional_ids(config, sts["metadata"]["name"])
    assert ids == {f"privstream-privstream-{i}" for i in range(INPUT_PARTITIONS)}


def test_the_memory_limit_follows_the_ledger_pairs() -> None:
    for pairs in (0, 1_000_000, 5_000_000):
        docs = _render(f"ledgerPairs={pairs}")
        sts = _one(docs, "StatefulSet")
        assert sts["metadata"]["annotations"]["privstream.dev/ledger-pairs"] == str(pairs)
        limit = _container(sts)["resources"]["limits"]["memory"]
        assert limit == f"{memory_limit_mib(pairs)}Mi", pairs


def test_a_config_change_rolls_the_pods(sts: dict[str, Any]) -> None:
    changed = _one(_render("config.privacy.epsilon=1.5"), "StatefulSet")
    key = "checksum/config"
    ours = sts["spec"]["template"]["metadata"]["annotations"][key]
    assert changed["spec"]["template"]["metadata"]["annotations"][key] != ours


def test_the_other_resources_match_kustomize(rendered: list[dict[str, Any]]) -> None:
    for kind in ("PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor", "ScaledObject"):
        ours, theirs = _one(rendered, kind)["spec"], _kustomize(kind)["spec"]
        assert ours == theirs, kind
    auth = _one(rendered, "TriggerAuthentication")["spec"]
    assert auth == _kustomize("TriggerAuthentication")["spec"]
    services = {d["metadata"]["name"]: d["spec"] for d in rendered if d["kind"] == "Service"}
    theirs = {d["metadata"]["name"]: d["spec"] for f, d in MANIFESTS if d["kind"] == "Service"}
    assert services == theirs


def test_the_image_is_the_packaged_version(sts: dict[str, Any]) -> None:
    """Chart.yaml's appVersion and the Kustomize image tag follow the one version."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["appVersion"] == privstream.__version__
    assert _container(sts)["image"] == f"privstream:{privstream.__version__}"
    assert _container(_kustomize("StatefulSet"))["image"] == _container(sts)["image"]


def test_no_secret_is_in_the_chart() -> None:
    for path in CHART.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"[0-9a-fA-F]{64}", text), path.name  # a keygen output
            assert "BEGIN PRIVATE KEY" not in text, path.name
            assert "kind: Secret\n" not in text, path.name

"""The Helm chart: lint, strict values, least-privilege RBAC, restricted pod security, CRDs in sync."""

from __future__ import annotations

import re
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.chart import CHART, by_kind, helm, render

REPO = Path(__file__).resolve().parents[2]
GENERATED_CRD = REPO / "crds" / "training.dtjob.io_distributedtrainingjobs.yaml"


def test_the_chart_lints_cleanly() -> None:
    result = helm("lint", "--strict", str(CHART), check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_charts_crds_are_byte_identical_to_the_generated_ones() -> None:
    generated = sorted((REPO / "crds").glob("*.yaml"))
    assert generated
    for crd in generated:
        assert (CHART / "crds" / crd.name).read_bytes() == crd.read_bytes(), (
            f"run `make crd` ({crd.name} differs)"
        )


@pytest.mark.parametrize(
    "bad",
    [
        "bogus=1",
        "image.pullPolicy=Sometimes",
        "metrics.port=70000",
        "logLevel=trace",
        "replicas=0",
        "apiQPS=0",
        "apiQPS=fast",
        "apiBurst=0",
        "maxConcurrentPasses=0",
        "nccl.daemonImages.tcpxx=r/d:1",
    ],
)
def test_the_values_schema_rejects_unknown_or_invalid_values(bad: str) -> None:
    result = helm("template", "r", str(CHART), "--set", bad, check=False)
    assert result.returncode != 0, f"{bad} was accepted"


def test_rbac_is_least_privilege_no_wildcards_and_no_secrets() -> None:
    for mode in ((), ("watchNamespaces={team-a,team-b}",)):
        docs = render(*mode)
        rules = [r for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]]
        assert rules
        for rule in rules:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
            assert "secrets" not in rule["resources"]


def test_watching_listed_namespaces_grants_roles_there_and_passes_them_to_the_operator() -> None:
    docs = render("watchNamespaces={team-a,team-b}")
    roles = [r for r in by_kind(docs, "Role") if not r["metadata"]["name"].endswith("-leader-election")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    cluster_rules = by_kind(docs, "ClusterRole")[0]["rules"]
    assert not any("pods" in r["resources"] for r in cluster_rules), "pod access must stay namespaced"
    args = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args and "--all-namespaces" not in args


def test_the_operator_pod_is_restricted_and_probed() -> None:
    deployment = by_kind(render(), "Deployment")[0]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    container = pod["containers"][0]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["limits"]["memory"]


def test_metrics_service_and_optional_service_monitor() -> None:
    assert by_kind(render(), "Service") and not by_kind(render(), "ServiceMonitor")
    assert by_kind(render("metrics.serviceMonitor.enabled=true"), "ServiceMonitor")
    services = [s["metadata"]["name"] for s in by_kind(render("metrics.enabled=false"), "Service")]
    assert services == ["r-dtjob-operator-progress"]


def test_the_progress_intake_has_a_service_the_pods_are_told_of_and_may_review_tokens() -> None:
    docs = render()
    service = next(s for s in by_kind(docs, "Service") if s["metadata"]["name"].endswith("-progress"))
    assert service["spec"]["ports"] == [{"name": "progress", "port": 8082, "targetPort": "progress"}]
    env = container_env(docs)
    assert env["DTJOB_PROGRESS_URL"] == "http://r-dtjob-operator-progress.dtjob-system.svc:8082/v1/progress"
    assert (env["DTJOB_PROGRESS_PORT"], env["DTJOB_PROGRESS_STATUS_SECONDS"]) == ("8082", "30")
    assert ("authentication.k8s.io", "tokenreviews", "create") in granted(docs)
    off = render("progress.enabled=false")
    assert "DTJOB_PROGRESS_URL" not in container_env(off)
    assert ("authentication.k8s.io", "tokenreviews", "create") not in granted(off)


def container_env(docs: list[dict[str, Any]]) -> dict[str, Any]:
    container = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_replicas_roll_because_only_the_lease_holder_acts() -> None:
    assert by_kind(render(), "Deployment")[0]["spec"]["replicas"] == 1
    deployment = by_kind(render("replicas=2"), "Deployment")[0]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    env = container_env(render("replicas=2"))
    assert env["DTJOB_LEADER_ELECTION_LEASE"] == "r-dtjob-operator"
    assert env["DTJOB_LEADER_ELECTION_NAMESPACE"] == "dtjob-system"
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_the_lease_role_grants_get_create_update_on_leases_and_nothing_else() -> None:
    for mode in ((), ("watchNamespaces={team-a,dtjob-system}",)):
        docs = render(*mode)
        lease_rules = [
            (d, r) for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]
            if "coordination.k8s.io" in r["apiGroups"] or "leases" in r["resources"]
        ]  # fmt: skip
        assert {d["metadata"]["name"] for d, _ in lease_rules} == {"r-dtjob-operator-leader-election"}
        role = lease_rules[0][0]
        assert role["kind"] == "Role" and role["metadata"]["namespace"] == "dtjob-system"
        assert all(
            r["apiGroups"] == ["coordination.k8s.io"] and r["resources"] == ["leases"] for r in role["rules"]
        )
        assert sorted(v for r in role["rules"] for v in r["verbs"]) == ["create", "get", "update"]
        named = next(r for r in role["rules"] if "get" in r["verbs"])
        assert named["resourceNames"] == ["r-dtjob-operator"]  # reads and renewals: this release's only
        binding = next(
            d
            for d in by_kind(docs, "RoleBinding")
            if d["metadata"]["name"] == "r-dtjob-operator-leader-election"
        )
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "r-dtjob-operator", "namespace": "dtjob-system"}
        ]


THROUGHPUT_ENV = ("DTJOB_MAX_CONCURRENT_PASSES", "DTJOB_API_QPS", "DTJOB_API_BURST")


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        pytest.param((), ("8", "100", "200"), id="the defaults"),
        pytest.param(
            ("maxConcurrentPasses=16", "apiQPS=50", "apiBurst=5"), ("16", "50", "5"), id="set values"
        ),
    ],
)
def test_throughput_values_reach_the_operator_environment(
    sets: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    env = container_env(render(*sets))
    assert tuple(env[name] for name in THROUGHPUT_ENV) == expected


def test_the_kueue_value_reaches_the_operator_environment() -> None:
    assert container_env(render())["DTJOB_KUEUE"] == "true"
    assert container_env(render("kueue=false"))["DTJOB_KUEUE"] == "false"


def test_extra_env_reaches_the_operator_environment_after_the_charts_own() -> None:
    env = container_env(render("extraEnv[0].name=DTJOB_FAULT_HOOK", "extraEnv[0].value=exit"))
    assert env["DTJOB_FAULT_HOOK"] == "exit" and list(env)[-1] == "DTJOB_FAULT_HOOK"
    assert "DTJOB_FAULT_HOOK" not in container_env(render())


def test_the_operator_runs_with_two_malloc_arenas() -> None:
    assert container_env(render())["MALLOC_ARENA_MAX"] == "2"


def test_daemon_image_values_reach_the_operator_environment_only_when_set() -> None:
    assert not {"DTJOB_TCPX_DAEMON_IMAGE", "DTJOB_TCPXO_DAEMON_IMAGE"} & set(container_env(render()))
    env = container_env(render("nccl.daemonImages.tcpxo=registry.example/tcpgpudmarxd-dev:v1.0.23"))
    assert env["DTJOB_TCPXO_DAEMON_IMAGE"] == "registry.example/tcpgpudmarxd-dev:v1.0.23"
    assert "DTJOB_TCPX_DAEMON_IMAGE" not in env


def test_the_operator_may_list_gke_networks_and_nothing_more_of_them() -> None:
    rules = by_kind(render(), "ClusterRole")[0]["rules"]
    network_rules = [r for r in rules if "networking.gke.io" in r["apiGroups"]]
    assert network_rules == [
        {"apiGroups": ["networking.gke.io"], "resources": ["networks"], "verbs": ["list"]}
    ]


# Every permission the operator holds, and the text in operator/dtjob (or the chart's Deployment) that
# needs it: a client call, or a Kopf handler or flag for which Kopf makes the call. The chart grants
# exactly these, in both modes.
OPERATOR = REPO / "operator" / "dtjob"
USED: dict[tuple[str, str, str], str] = {
    ("", "nodes", "get"): ".read_node(",
    ("", "nodes", "list"): "core().list_node,",  # the nodes' reader
    ("", "nodes", "watch"): "core().list_node,",
    ("networking.gke.io", "networks", "list"): ".list_cluster_custom_object(NETWORK_GROUP",
    ("apps", "daemonsets", "list"): "apps().list_namespaced_daemon_set(",  # GPUDirect's installers
    ("resource.k8s.io", "deviceclasses", "list"): "resource().list_device_class(",  # managed DRANET
    # ManagedRDMA's ResourceClaimTemplate: server-side apply creates a missing one.
    ("resource.k8s.io", "resourceclaimtemplates", "create"): ".patch_namespaced_resource_claim_template",
    ("resource.k8s.io", "resourceclaimtemplates", "patch"): ".patch_namespaced_resource_claim_template",
    ("training.dtjob.io", "distributedtrainingjobs", "get"): ".get_namespaced_custom_object(",
    ("training.dtjob.io", "distributedtrainingjobs", "list"): "list_namespaced_custom_object, GROUP",
    ("training.dtjob.io", "distributedtrainingjobs", "watch"): "list_namespaced_custom_object, GROUP",
    # A pass removes the finalizer earlier versions put on jobs.
    ("training.dtjob.io", "distributedtrainingjobs", "patch"): "write.drop_finalizer, job, LEGACY_FINALIZER",
    ("training.dtjob.io", "distributedtrainingjobs", "delete"): ".delete_namespaced_custom_object(",
    (
        "training.dtjob.io",
        "distributedtrainingjobs/status",
        "patch",
    ): ".patch_namespaced_custom_object_status(",
    ("", "pods", "get"): ".read_namespaced_pod(",  # a created pod its watch has not delivered
    ("", "pods", "list"): "core().list_pod_for_all_namespaces",  # the pods' reader; a job's pods listed
    ("", "pods", "watch"): "core().list_pod_for_all_namespaces",
    ("", "pods", "create"): ".create_namespaced_pod(",
    ("", "pods", "patch"): ".patch_namespaced_pod(",
    ("", "pods", "delete"): ".delete_namespaced_pod",
    ("", "services", "list"): "core().list_service_for_all_namespaces",
    ("", "services", "watch"): "core().list_service_for_all_namespaces",
    ("", "services", "create"): ".patch_namespaced_service",  # server-side apply creates a missing one
    ("", "services", "patch"): ".patch_namespaced_service",
    ("", "services", "delete"): ".delete_namespaced_service",
    ("networking.k8s.io", "networkpolicies", "list"): "list_network_policy_for_all_namespaces",
    ("networking.k8s.io", "networkpolicies", "watch"): "list_network_policy_for_all_namespaces",
    ("networking.k8s.io", "networkpolicies", "create"): ".patch_namespaced_network_policy",  # as services
    ("networking.k8s.io", "networkpolicies", "patch"): ".patch_namespaced_network_policy",
    ("networking.k8s.io", "networkpolicies", "delete"): ".delete_namespaced_network_policy",
    ("", "events", "create"): ".create_namespaced_event(",
    ("", "events", "patch"): ".patch_namespaced_event(",
    ("kueue.x-k8s.io", "workloads", "list"): "_kueue_lister(kueue.WORKLOADS",  # a queued job's Workload
    ("kueue.x-k8s.io", "workloads", "watch"): "_kueue_lister(kueue.WORKLOADS",
    ("kueue.x-k8s.io", "workloads", "create"): ".create_namespaced_custom_object(",
    (
        "kueue.x-k8s.io",
        "workloads",
        "patch",
    ): "kueue.WORKLOADS, name, body, **deadline",  # active while not suspended; podSets and queue matched
    ("kueue.x-k8s.io", "workloads", "delete"): "delete_namespaced_custom_object(",  # the job left Kueue
    (
        "kueue.x-k8s.io",
        "workloads/status",
        "patch",
    ): ".patch_namespaced_custom_object_status(\n                kueue.GROUP",  # quota back; Finished
    ("apiextensions.k8s.io", "customresourcedefinitions", "get"): ".read_custom_resource_definition(",
    ("apiextensions.k8s.io", "customresourcedefinitions", "patch"): ".patch_custom_resource_definition(",
    ("kueue.x-k8s.io", "localqueues", "list"): "_kueue_lister(kueue.LOCAL_QUEUES",  # the ClusterQueue named
    ("kueue.x-k8s.io", "localqueues", "watch"): "_kueue_lister(kueue.LOCAL_QUEUES",
    ("kueue.x-k8s.io", "resourceflavors", "list"): "_kueue_lister(kueue.RESOURCE_FLAVORS",
    ("kueue.x-k8s.io", "resourceflavors", "watch"): "_kueue_lister(kueue.RESOURCE_FLAVORS",
    ("kueue.x-k8s.io", "workloadpriorityclasses", "get"): ".get_cluster_custom_object(",
    ("scheduling.k8s.io", "priorityclasses", "get"): ".read_priority_class(",
    ("scheduling.k8s.io", "priorityclasses", "list"): ".list_priority_class(",  # the globalDefault one
    ("authentication.k8s.io", "tokenreviews", "create"): ".create_token_review(",  # the progress intake
    ("coordination.k8s.io", "leases", "create"): ".create_namespaced_lease(",
    ("coordination.k8s.io", "leases", "get"): ".read_namespaced_lease(",
    ("coordination.k8s.io", "leases", "update"): ".replace_namespaced_lease(",
}


def granted(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for d in docs
        if d["kind"] in ("ClusterRole", "Role")
        for rule in d["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_chart_grants_exactly_the_verbs_the_code_uses() -> None:
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    source = "\n".join(p.read_text() for p in OPERATOR.rglob("*.py")) + deployment
    for permission, needed_by in USED.items():
        assert needed_by in source, f"{permission} is granted for {needed_by!r}, which the code no longer has"
    for mode in ((), ("watchNamespaces={team-a}",)):
        assert granted(render(*mode)) == set(USED), mode


def test_the_chart_packages_as_its_release_with_the_crd(tmp_path: Path) -> None:
    """`make chart-package`'s archive: named for the release, the CRD in crds/ (installed on first install)."""
    release = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    helm("package", str(CHART), "--destination", str(tmp_path))
    archive = tmp_path / f"dtjob-operator-{release}.tgz"
    with tarfile.open(archive) as packed:
        names = packed.getnames()
        chart = yaml.safe_load(packed.extractfile("dtjob-operator/Chart.yaml").read())  # type: ignore[union-attr]
    assert (chart["version"], chart["appVersion"]) == (release, release)
    assert f"dtjob-operator/crds/{GENERATED_CRD.name}" in names


def test_the_notes_name_only_files_and_services_that_exist() -> None:
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    assert "://" not in notes, "a URL the tests cannot check: name a file of the repository instead"
    paths = re.findall(r"\b(?:examples|docs)/[\w./-]*\w", notes)
    assert paths, notes
    for path in paths:
        assert (REPO / path).exists(), f"NOTES.txt names {path}, which does not exist"
    for service in re.findall(r"svc/(\{\{[^}]*\}\}[\w-]*)", notes):
        assert f"name: {service}" in (CHART / "templates" / "metrics.yaml").read_text(), service

"""The cluster's hygiene: what a test left behind that later tests would meet ("Nothing leaks, and the
test that leaked is the one that fails"). `snapshot` reads what can leak, `findings` (pure) names each
difference from the cluster at rest in a line, `restore` undoes them. The cluster at rest:
- nodes: the first real node, untainted and schedulable (localcluster/node.py registers it so), and kwok's
  fleet, each with its GPU (and spot) taint (localcluster/fakenodes.py `fleet`: `Cluster.up` makes 200).
  Any other node is a test's own: fake ones (`own_nodes`: OWN_NODE_TAINT) or the second real node
  (`second_node`: SECOND_NODE_TAINT), tainted so that no other test's pod lands there; one left open is
  a leak;
- no webhook configuration but Kueue's two while Kueue runs (localcluster/kueue.py `start` and `stop`);
- no globalDefault PriorityClass: one gives every later pod its priority;
- no Kueue Workload, no pod in a test namespace (the latter only while the check's test held the cluster
  alone), but the running test's; the committed CRD (or none yet).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import yaml
from kubernetes import client

from dtjob.api import CRD_NAME
from dtjob.core import kueue
from dtjob.crd import REVISION_ANNOTATION
from hack.flake_net import HYGIENE_MARK  # the net never reruns a test that failed the check
from localcluster import Cluster, fakenodes
from localcluster.crds import wait_established
from localcluster.layout import REAL_NODES
from tests.support.jobs import OWN_NODE_TAINT
from tests.support.paths import CRD_FILE
from tests.support.waiting import wait_for

FLEET_SIZE = 200  # Cluster.up's fake_nodes: the fleet at_tier (and `make cluster-up`) brings up
FIRST_NODE = REAL_NODES[0].name
SECOND_NODE_TAINT = {"key": "test.dtjob.io/second-node", "value": "true", "effect": "NoSchedule"}
SECOND_NODE_TOLERATION = {"key": SECOND_NODE_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
# A node tainted so is kept to the test that made it: no other test's pod tolerates these.
RESERVING_TAINTS = frozenset((OWN_NODE_TAINT["key"], SECOND_NODE_TAINT["key"]))
# The node lifecycle controller's (not-ready, unreachable): they come and go by themselves.
LIFECYCLE_TAINTS = "node.kubernetes.io/"
KUEUE_WEBHOOKS = {(kind, f"kueue-{kind}-webhook-configuration") for kind in ("mutating", "validating")}
# The namespace fixture's names (tests/conftest.py), also ending the names of cluster-scoped objects a
# test makes for itself (`default-t-...` PriorityClasses, `slow-admission-t-...` webhooks).
TEST_NAMESPACE = re.compile(r"(?:^|-)(t-[a-z0-9-]*[0-9a-f]{6})$")
OPEN_NODE = (
    "not a node of the cluster at rest, and open to every test's pods: "
    f"neither cordoned nor tainted {' or '.join(sorted(RESERVING_TAINTS))}"
)

Taint = tuple[str, str, str]  # key, value ("" for none), effect


@dataclass(frozen=True)
class Node:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    phase: str


@dataclass(frozen=True)
class ClusterSnapshot:
    nodes: tuple[Node, ...] = ()
    webhooks: tuple[tuple[str, str], ...] = ()  # (kind: "mutating" or "validating", name)
    priority_classes: tuple[tuple[str, bool], ...] = ()  # (name, globalDefault)
    workloads: tuple[tuple[str, str], ...] = ()  # Kueue's, (namespace, name)
    crd_digest: str | None = None  # the installed DistributedTrainingJob CRD's; None: not installed
    pods: tuple[Pod, ...] = ()  # the Running and Pending ones
    kueue_running: bool = False


@dataclass(frozen=True)
class Leak:
    kind: str
    name: str
    why: str
    namespace: str = ""

    @property
    def subject(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


def _taints(raw: list[dict[str, Any]] | None) -> tuple[Taint, ...]:
    return tuple(sorted((t["key"], t.get("value") or "", t["effect"]) for t in raw or []))


@cache
def at_rest_taints() -> dict[str, tuple[Taint, ...]]:
    """Every node of the cluster at rest, with its taints."""
    fleet = {n["metadata"]["name"]: _taints(n["spec"]["taints"]) for n in fakenodes.fleet(FLEET_SIZE)}
    return {**fleet, FIRST_NODE: ()}


def crd_digest(crd: dict[str, Any]) -> str:
    """A digest of the CRD's versions' schemas and of the schema revision the operator reads."""

    def whole(value: Any) -> Any:  # YAML's 1.0 comes back from the apiserver as 1
        if isinstance(value, dict):
            return {k: whole(v) for k, v in value.items()}
        if isinstance(value, list):
            return [whole(v) for v in value]
        return int(value) if isinstance(value, float) and value.is_integer() else value

    revision = (crd["metadata"].get("annotations") or {}).get(REVISION_ANNOTATION)
    schemas = [[version["name"], version.get("schema")] for version in crd["spec"]["versions"]]
    return hashlib.sha256(json.dumps(whole([revision, schemas]), sort_keys=True).encode()).hexdigest()


@cache
def committed_crd_digest() -> str:
    return crd_digest(yaml.safe_load(CRD_FILE.read_text()))


def _own_taints(node: Node) -> tuple[Taint, ...]:
    return tuple(t for t in node.taints if not t[0].startswith(LIFECYCLE_TAINTS))


def _keys(taints: tuple[Taint, ...]) -> list[str]:
    return [key for key, _, _ in taints]


def _state(cordoned: bool, taints: tuple[Taint, ...]) -> str:
    keys = ", ".join(_keys(taints))
    return f"{'cordoned' if cordoned else 'schedulable'}, {f'tainted {keys}' if keys else 'untainted'}"


def _owner(name: str) -> str | None:
    """The test namespace a name is made from, if any."""
    found = TEST_NAMESPACE.search(name)
    return found.group(1) if found else None


def leaks(snapshot: ClusterSnapshot, running_namespace: str | None, alone: bool = False) -> list[Leak]:
    """What differs from the cluster at rest. The running test's namespace goes with what is in it (the
    namespace fixture deletes it without waiting): its pods and Workloads are no leak, while an object of
    the whole cluster named after it outlives it and is. Unless `alone` (the test held the cluster by
    itself: cluster_wide, or a rerun), other tests may be running: what is named after their namespaces
    is theirs, and no pod is looked at."""

    def theirs(name: str) -> bool:
        return not alone and _owner(name) not in (None, running_namespace)

    found: list[Leak] = []
    for node in snapshot.nodes:
        taints, rest = _own_taints(node), at_rest_taints().get(node.name)
        if rest is not None and (node.unschedulable or taints != rest):
            now = _state(node.unschedulable, taints)
            found.append(Leak("node", node.name, f"{now}; at rest {_state(False, rest)}"))
        elif rest is None and not node.unschedulable and not set(_keys(taints)) & RESERVING_TAINTS:
            found.append(Leak("node", node.name, OPEN_NODE))
    expected = KUEUE_WEBHOOKS if snapshot.kueue_running else set()
    for kind, name in snapshot.webhooks:
        if (kind, name) not in expected and not theirs(name):
            kueues = (kind, name) in KUEUE_WEBHOOKS
            why = "Kueue is not running: it refuses" if kueues else "not the cluster's at rest: it intercepts"
            found.append(Leak(f"{kind}webhookconfiguration", name, f"{why} later tests' writes"))
    for name, global_default in snapshot.priority_classes:
        if global_default and not theirs(name):
            found.append(Leak("priorityclass", name, "globalDefault: every later pod gets its priority"))
    for namespace, name in snapshot.workloads:
        if namespace != running_namespace:
            found.append(Leak("workload", name, "left by a test that ended: it may hold quota", namespace))
    if snapshot.crd_digest not in (None, committed_crd_digest()):
        found.append(Leak("customresourcedefinition", CRD_NAME, f"not the committed {CRD_FILE.name}"))
    stray: dict[str, list[str]] = {}
    for pod in snapshot.pods if alone else ():
        if pod.namespace.startswith("t-") and pod.namespace != running_namespace:
            stray.setdefault(pod.namespace, []).append(f"{pod.name} ({pod.phase})")
    for namespace, pods in sorted(stray.items()):
        found.append(Leak("namespace", namespace, f"a test's, its pods live: {', '.join(sorted(pods))}"))
    return found


def findings(snapshot: ClusterSnapshot, running_namespace: str | None, alone: bool = False) -> list[str]:
    """One line a leak (`leaks`): the object, and why it is one."""
    return [f"{leak.subject}: {leak.why}" for leak in leaks(snapshot, running_namespace, alone)]


def message(found: list[str]) -> str:
    """The failure of a test that left `found` behind."""
    return f"{HYGIENE_MARK}: the test left the cluster dirty:\n" + "\n".join(f"  {line}" for line in found)


def _items(call: Callable[..., Any], *args: Any) -> list[dict[str, Any]]:
    """A list as the apiserver's JSON (quicker than the client's models); none for a 404 (no Kueue)."""
    return list((_raw(call, *args) or {}).get("items") or [])


def _raw(call: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
    try:
        return dict(json.loads(call(*args, _preload_content=False).data))
    except client.ApiException as err:
        if err.status != 404:
            raise
        return None


def snapshot(api_client: client.ApiClient, kueue_running: bool | None = None) -> ClusterSnapshot:
    """What can leak, as the cluster has it now; whether Kueue runs, from the local cluster's processes
    unless given."""
    core, hooks = client.CoreV1Api(api_client), client.AdmissionregistrationV1Api(api_client)
    workloads = (client.CustomObjectsApi(api_client).list_cluster_custom_object, kueue.GROUP, kueue.VERSION)
    crd = _raw(client.ApiextensionsV1Api(api_client).read_custom_resource_definition, CRD_NAME)
    nodes = [(n["metadata"], n["spec"]) for n in _items(core.list_node)]
    webhooks = {"mutating": _items(hooks.list_mutating_webhook_configuration),
                "validating": _items(hooks.list_validating_webhook_configuration)}  # fmt: skip
    classes = _items(client.SchedulingV1Api(api_client).list_priority_class)
    # A pod being deleted, or in a namespace being deleted (the namespace fixture deletes without
    # waiting), is going: no leak; so is a Workload there, unless a finalizer holds it.
    going = {
        n["metadata"]["name"] for n in _items(core.list_namespace) if n["metadata"].get("deletionTimestamp")
    }
    pods = [
        p
        for p in _items(core.list_pod_for_all_namespaces)
        if p["status"].get("phase") in ("Running", "Pending")
        and not p["metadata"].get("deletionTimestamp")
        and p["metadata"]["namespace"] not in going
    ]
    return ClusterSnapshot(
        nodes=tuple(
            Node(
                meta["name"],
                meta.get("labels") or {},
                _taints(spec.get("taints")),
                bool(spec.get("unschedulable")),
            )
            for meta, spec in nodes
        ),
        webhooks=tuple((kind, c["metadata"]["name"]) for kind, listed in webhooks.items() for c in listed),
        priority_classes=tuple((c["metadata"]["name"], bool(c.get("globalDefault"))) for c in classes),
        # One being deleted that nothing holds (no finalizer) is going, as its namespace's pods are.
        workloads=tuple(
            (w["metadata"]["namespace"], w["metadata"]["name"])
            for w in _items(*workloads, kueue.WORKLOADS)
            if w["metadata"].get("finalizers")
            or not (w["metadata"].get("deletionTimestamp") or w["metadata"]["namespace"] in going)
        ),
        crd_digest=crd_digest(crd) if crd else None,
        pods=tuple(
            Pod(p["metadata"]["namespace"], p["metadata"]["name"], p["status"]["phase"]) for p in pods
        ),
        kueue_running=Cluster().procs.running("kueue") if kueue_running is None else kueue_running,
    )


def restore(
    api_client: client.ApiClient,
    kubectl: Callable[..., str],
    snapshot: ClusterSnapshot,
    running_namespace: str | None = None,
    alone: bool = False,
) -> list[str]:
    """Undo each leak of the snapshot (`leaks`, with the same arguments); what was done, a line each.
    `kubectl(*args, check=...)` as `Cluster.kubectl`."""
    core, hooks = client.CoreV1Api(api_client), client.AdmissionregistrationV1Api(api_client)
    objects, scheduling = client.CustomObjectsApi(api_client), client.SchedulingV1Api(api_client)
    nodes = {node.name: node for node in snapshot.nodes}
    done = []
    for leak in leaks(snapshot, running_namespace, alone):
        kind, name, what = leak.kind, leak.name, "deleted"
        if kind == "node" and name in at_rest_taints():
            core.patch_node(name, {"spec": {"unschedulable": None, "taints": _body(at_rest_taints()[name])}})
            what = "uncordoned, tainted as at rest"
        elif kind == "node" and name in {real.name for real in REAL_NODES}:  # its kubelet is not ours
            taints = [*_body(_own_taints(nodes[name])), SECOND_NODE_TAINT]
            core.patch_node(name, {"spec": {"unschedulable": True, "taints": taints}})
            what = f"cordoned, tainted {SECOND_NODE_TAINT['key']}"
        elif kind == "node":  # a fake one: nothing but kwok plays it
            _gone(core.delete_node, name)
        elif kind == "mutatingwebhookconfiguration":
            _gone(hooks.delete_mutating_webhook_configuration, name)
        elif kind == "validatingwebhookconfiguration":
            _gone(hooks.delete_validating_webhook_configuration, name)
        elif kind == "priorityclass" and _owner(name):  # a test made it (tests/integration/test_kueue.py)
            _gone(scheduling.delete_priority_class, name)
        elif kind == "priorityclass":  # not the suite's to delete
            scheduling.patch_priority_class(name, {"globalDefault": False})
            what = "globalDefault false"
        elif kind == "workload":  # the operator's finalizer holds it (docs/kueue.md)
            args = (kueue.GROUP, kueue.VERSION, leak.namespace, kueue.WORKLOADS, name)
            _gone(objects.patch_namespaced_custom_object, *args, {"metadata": {"finalizers": None}})
            _gone(objects.delete_namespaced_custom_object, *args)
            what = "finalizers removed, deleted"
        elif kind == "customresourcedefinition":
            kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
            wait_established(kubectl, [CRD_NAME])
            what = f"{CRD_FILE.name} applied"
        elif kind == "namespace":
            _gone(core.delete_namespace, name)
            what = "deleted, its pods with it"
        done.append(f"{leak.subject}: {what}")
    return done


def settle(api_client: client.ApiClient, timeout: float = 180.0) -> list[str]:
    """Wait (up to `timeout`) until no namespace is being deleted: the namespace controller deleting a
    suite's worth of them keeps the machine busy, and a test rerun alone must find it at rest (an ETA
    judged beside that clean-up was 48 % off, 2026-12-02). Returns the namespaces still going."""
    core = client.CoreV1Api(api_client)

    def going() -> list[str]:
        return sorted(
            n["metadata"]["name"]
            for n in _items(core.list_namespace)
            if n["metadata"].get("deletionTimestamp")
        )

    try:
        wait_for(lambda: not going(), "no namespace being deleted", timeout=timeout, interval=1, timing=True)
    except AssertionError:
        return going()
    return []


def _body(taints: tuple[Taint, ...]) -> list[dict[str, str]]:
    """Taints to write; the lifecycle controller's left out (it adds them again, with their times)."""
    return [{"key": k, **({"value": v} if v else {}), "effect": e} for k, v, e in taints]


def _gone(call: Callable[..., Any], *args: Any) -> None:
    """`call`, an object already gone (404) or going (409) being as good as done."""
    try:
        call(*args)
    except client.ApiException as err:
        if err.status not in (404, 409):
            raise

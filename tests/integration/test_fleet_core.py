"""The read/write path against a real apiserver (tier B): a pass reads from the watches and writes only
what changed; an upgrade's new render never touches running pods; a rollback's unknown status keeps the
attempt; a failing job backs off on its own."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from kopf.testing import KopfRunner
from kubernetes import client

import dtjob.core.writes
from dtjob.core.observed import pod_essentials
from dtjob.core.plan import Event, Plan
from dtjob.core.reconcile import reconcile
from dtjob.core.render import render_children
from dtjob.core.world import KueueFacts, Needs, World
from dtjob.kube.access import Kube
from dtjob.kube.events import EventRecorder
from dtjob.kube.gate import Gate
from dtjob.kube.writer import NameTaken
from dtjob.runtime.one_pass import run_pass
from dtjob.settings import DEFAULT_API_BURST, DEFAULT_API_QPS
from localcluster import Cluster, sim
from tests.support.jobs import JOB_LABEL, Jobs, pytorch_job
from tests.support.namespaces import create_namespace
from tests.support.operator import Records, running_operator, wake
from tests.support.paths import CRD_FILE
from tests.support.plan import plan_for
from tests.support.reads import wait_event
from tests.support.waiting import wait_for


def versions(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, str]:
    """The resourceVersion of every child: any write to one changes it."""
    selector = f"{JOB_LABEL}={name}"
    children = [*core.list_namespaced_pod(namespace, label_selector=selector).items,
                *core.list_namespaced_service(namespace, label_selector=selector).items]  # fmt: skip
    return {f"{c.kind or type(c).__name__}/{c.metadata.name}": c.metadata.resource_version for c in children}


def events_of(core: client.CoreV1Api, namespace: str, name: str) -> list[client.CoreV1Event]:
    items = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [e for e in items if e.source and e.source.component == "dtjob-operator"]


def test_a_quiet_running_job_writes_nothing_when_woken(
    operator: KopfRunner, jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    jobs.create(pytorch_job("quiet", workers=3))
    jobs.wait_pods("quiet", 3, phase="Running")
    jobs.wait_condition("quiet", "Running")
    wait_for(lambda: jobs.get("quiet")["status"].get("replicasReady") == "3/3", "3/3 ready in the status")
    # The Running condition's Event, posted after that pass's status: none may land after the count.
    wait_event(core, namespace, "quiet", "AllReplicasRunning")
    children, status, events = versions(core, namespace, "quiet"), jobs.get("quiet")["status"], events_of(core, namespace, "quiet")  # fmt: skip
    for n in range(3):
        wake(jobs, "quiet", n)
    assert versions(core, namespace, "quiet") == children  # no pod or Service written
    assert jobs.get("quiet")["status"] == status
    assert len(events_of(core, namespace, "quiet")) == len(events)


def test_an_upgraded_render_never_touches_running_pods_and_reaches_the_next_attempt(
    cluster_b: Cluster,
    crd: dict[str, Any],
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with running_operator(cluster_b, namespace):
        jobs.create(pytorch_job("upgrade", workers=2, runPolicy={"backoffLimit": 3}))
        jobs.wait_pods("upgrade", 2, phase="Running")
        jobs.wait_condition("upgrade", "Running")
    before = {p.metadata.name: (p.metadata.uid, p.metadata.resource_version) for p in jobs.pods("upgrade")}

    # The next operator version renders one more environment variable into every pod.
    render_pod: Callable[..., dict[str, Any]] = dtjob.core.writes.render_pod

    def newer_render(*args: Any) -> dict[str, Any]:
        pod = render_pod(*args)
        pod["spec"]["containers"][0]["env"].append({"name": "NEW_IN_V2", "value": "1"})
        return pod

    monkeypatch.setattr(dtjob.core.writes, "render_pod", newer_render)
    with running_operator(cluster_b, namespace) as runner:
        wake(jobs, "upgrade", 1)
        after = {p.metadata.name: (p.metadata.uid, p.metadata.resource_version) for p in jobs.pods("upgrade")}
        assert after == before, "a live pod was written"
        # The status keeps moving: a failure restarts the gang, whose pods get the new render.
        sim.exit_pod(core, namespace, "upgrade-worker-1", exit_code=1)
        wait_for(lambda: jobs.get("upgrade")["status"].get("attempt") == 2, "attempt 2")
        pods = wait_for(lambda: (p := jobs.pods("upgrade")) and len(p) == 2 and
                        all(x.metadata.labels["training.dtjob.io/attempt"] == "2" for x in p) and p, "attempt 2's pods")  # fmt: skip
        for pod in pods:
            env = {e.name for e in pod.spec.containers[0].env}
            assert "NEW_IN_V2" in env
    assert "reconcile of" not in runner.output  # no pass failed (a re-applied live pod would: 422)


# A CRD with more enum values than this version's: another test's CRD apply would take them away.
@pytest.mark.cluster_wide
def test_a_status_from_a_newer_version_keeps_the_attempt_and_deletes_no_pod(
    cluster_b: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    """A rollback: the newer version's CRD (kept by Helm) lets its status carry a condition type and a
    phase this version does not know."""
    newer = yaml.safe_load(CRD_FILE.read_text())
    status_schema = newer["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"][
        "properties"
    ]
    status_schema["phase"]["enum"].append("Draining")
    status_schema["conditions"]["items"]["properties"]["type"]["enum"].append("Degraded")
    cluster_b.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump(newer))
    try:
        with running_operator(cluster_b, namespace):
            jobs.create(pytorch_job("rollback", workers=2))
            jobs.wait_pods("rollback", 2, phase="Running")
            jobs.wait_condition("rollback", "Running")
        # What the newer version wrote before it was rolled back.
        status = jobs.get("rollback")["status"]
        degraded = {"type": "Degraded", "status": "True", "reason": "Newer", "message": "",
                    "lastTransitionTime": "2030-01-01T00:00:00Z"}  # fmt: skip
        written = {**status, "phase": "Draining", "conditions": [*status["conditions"], degraded]}
        jobs.api.patch_namespaced_custom_object_status(
            "training.dtjob.io",
            "v1alpha1",
            namespace,
            "distributedtrainingjobs",
            "rollback",
            {"status": written},
        )
        uids = {p.metadata.name: p.metadata.uid for p in jobs.pods("rollback")}
        with running_operator(cluster_b, namespace):
            wake(jobs, "rollback", 1)
            after = jobs.get("rollback")["status"]
            assert (after["attempt"], after["restarts"]) == (status["attempt"], status["restarts"])
            assert after["phase"] == "Running"
            assert {p.metadata.name: p.metadata.uid for p in jobs.pods("rollback")} == uids
    finally:
        cluster_b.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))


def test_a_job_whose_pods_admission_forbids_backs_off_alone(
    adapter_log: Records, operator: KopfRunner, jobs: Jobs, namespace: str
) -> None:
    # Forbidden (403), not invalid: the PriorityClass may yet be created, so the job retries, backing off.
    # (A pod the apiserver finds invalid makes the job Invalid instead: test_failure_judgement.py.)
    bad = pytorch_job("refused", workers=1)
    bad["spec"]["replicas"][0]["template"]["spec"]["priorityClassName"] = "no-such-class"
    jobs.create(bad)
    jobs.create(pytorch_job("healthy", workers=1))
    jobs.wait_pods("healthy", 1, phase="Running")  # a failing job does not hold up another
    pattern = re.compile(
        rf"reconcile of {namespace}/refused failed \((\d+) in a row\); retrying in ([\d.]+)s: (.*)"
    )

    def failures() -> list[re.Match[str]] | None:
        found = [m for line in list(adapter_log.messages) if (m := pattern.match(line))]
        return found if len(found) >= 5 else None

    found = wait_for(failures, "five failed passes", timeout=60)
    for count, match in enumerate(found[:5], start=1):
        ceiling = 0.5 * 2 ** (count - 1)
        assert int(match[1]) == count and ceiling / 2 <= float(match[2]) <= ceiling, match[0]
    assert "no PriorityClass with name no-such-class was found" in found[0][3]  # the apiserver's words


def test_the_same_event_again_bumps_the_count_of_the_first(
    crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    job = jobs.create(pytorch_job("noisy", workers=1))
    recorder = EventRecorder(Gate(DEFAULT_API_QPS, DEFAULT_API_BURST))
    for _ in range(3):
        recorder.post(job, Event("Warning", "PodFailed", "pod noisy-worker-0: Error, exit code 1"))
    recorder.post(job, Event("Warning", "PodFailed", "pod noisy-worker-0: Error, exit code 2"))
    events = sorted(events_of(core, namespace, "noisy"), key=lambda e: e.count)
    assert [(e.reason, e.message, e.count) for e in events] == [
        ("PodFailed", "pod noisy-worker-0: Error, exit code 2", 1),
        ("PodFailed", "pod noisy-worker-0: Error, exit code 1", 3),
    ]
    assert events[1].last_timestamp >= events[1].first_timestamp


def test_a_create_that_meets_a_namesake_is_fine_only_for_the_same_member_alive(
    crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str
) -> None:
    """Pod names carry no attempt: a 409 on create is the member the cache has not seen yet, or an earlier
    attempt's pod, or one on its way out (which the pass must not record as this attempt's)."""
    job = jobs.create(pytorch_job("namesake", workers=1))
    writer = Kube.at(DEFAULT_API_QPS, DEFAULT_API_BURST).write
    first, second = (
        next(c for c in render_children(job, attempt) if c["kind"] == "Pod") for attempt in (1, 2)
    )
    assert first["metadata"]["name"] == second["metadata"]["name"]
    assert writer.create_pod(first) is not None
    assert writer.create_pod(first) is None  # the same member: exists already, fine
    with pytest.raises(NameTaken, match="exists as another member's"):
        writer.create_pod(second)
    name = first["metadata"]["name"]
    core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": ["dtjob.test/hold"]}})
    core.delete_namespaced_pod(name, namespace)
    try:
        with pytest.raises(NameTaken, match="is being deleted"):
            writer.create_pod(first)
    finally:
        core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}})


def test_created_pods_the_watch_never_delivered_are_asked_for_before_they_count_as_lost(
    cluster_b: Cluster, crd: dict[str, Any], jobs: Jobs, namespace: str
) -> None:
    """After an outage the pod watch can come back later than CREATED_MEMORY: the pass then GETs the
    pods it created before it takes them for vanished members (which would restart the gang)."""
    with running_operator(cluster_b, namespace):
        jobs.create(pytorch_job("lagged"))
        jobs.wait_condition("lagged", "Running")
    job = jobs.get("lagged")
    created = [
        pod_essentials(jobs.core.api_client.sanitize_for_serialization(p)) for p in jobs.pods("lagged")
    ]
    now = datetime.now(UTC)
    # What a watch that lost the pods would make of it: both members vanished, the gang restarts.
    assert plan_for(job, [], now).status["phase"] == "Restarting"
    # The pass asks first: they exist, so nothing restarts and nothing is written.
    slot = threading.BoundedSemaphore(1)
    kube = Kube.at(DEFAULT_API_QPS, DEFAULT_API_BURST)
    world = World(job, [], now, [], kueue=KueueFacts(served=False), overdue=created, from_caches=True)
    plan, _, _, lagging = run_pass(slot, kube, world)
    assert sorted(p["metadata"]["name"] for p in lagging) == ["lagged-worker-0", "lagged-worker-1"]
    assert plan.status is None and not plan.create and not plan.delete
    assert jobs.get("lagged")["status"]["attempt"] == 1


def test_a_node_the_node_cache_lacks_is_read_before_its_pods_count_as_lost(
    cluster_b: Cluster, crd: dict[str, Any], jobs: Jobs, namespace: str
) -> None:
    """The node watch can be behind the pod watch (a node registered while the watch was restarting): the
    pass then reads the nodes its pods are bound to (Needs.nodes) before it judges them gone, which would
    take every member for lost on a deleted node and restart the gang."""
    with running_operator(cluster_b, namespace):
        jobs.create(pytorch_job("unseen"))
        jobs.wait_condition("unseen", "Running")
    job = jobs.get("unseen")
    pods = [pod_essentials(jobs.core.api_client.sanitize_for_serialization(p)) for p in jobs.pods("unseen")]
    assert all(p["spec"]["nodeName"] for p in pods), pods
    service = jobs.core.api_client.sanitize_for_serialization(
        jobs.core.read_namespaced_service("unseen", namespace)
    )
    children = [*pods, {**service, "kind": "Service"}]
    now = datetime.now(UTC)
    # What a pass judging the cache as it stands would do: the nodes absent, the members lost.
    cached = World(job, children, now, [], kueue=KueueFacts(served=False))
    judged = reconcile(cached)
    assert isinstance(judged, Plan) and judged.status is not None, judged
    assert judged.status["phase"] == "Restarting", judged.status
    # Marked as the caches it is: the core asks for the nodes, the pass reads them, and writes nothing.
    world = replace(cached, from_caches=True)
    assert reconcile(world) == Needs(nodes=tuple(sorted({p["spec"]["nodeName"] for p in pods})))
    plan = run_pass(threading.BoundedSemaphore(1), Kube.at(DEFAULT_API_QPS, DEFAULT_API_BURST), world)[0]
    assert plan.status is None and not plan.create and not plan.delete, plan
    assert jobs.get("unseen")["status"]["attempt"] == 1


def test_a_job_loop_that_dies_outside_its_pass_is_started_again_with_an_event(
    operator: KopfRunner,
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An error outside the pass's own try (here: reading the cached children) kills the job's loop; it is
    started again within seconds, says so in an Event, and the job goes on as if nothing happened."""
    import dtjob.runtime.loop

    real, broken = dtjob.runtime.loop.children_seen, []

    def children_once(*args: Any) -> Any:
        if not broken:
            broken.append(True)
            raise RuntimeError("injected: the cache could not be read")
        return real(*args)

    monkeypatch.setattr(dtjob.runtime.loop, "children_seen", children_once)
    jobs.create(pytorch_job("phoenix"))
    jobs.wait_pods("phoenix", 2, "Running", timeout=30)
    wait_event(core, namespace, "phoenix", "LoopRestarted")  # posted on its own, beside the restarted loop
    restarted = [e for e in core.list_namespaced_event(namespace).items if e.reason == "LoopRestarted"]
    assert len(restarted) == 1 and "injected" in restarted[0].message, restarted
    assert restarted[0].involved_object.name == "phoenix"


def test_a_one_pod_job_is_not_queued_behind_big_gangs_whose_pods_are_being_created(
    cluster_b: Cluster,
    crd: dict[str, Any],
    namespace: str,
    jobs: Jobs,
    core: client.CoreV1Api,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One pass slot and 20 requests/s: three 32-pod gangs take about five seconds to create. A pass gives
    its slot up while its pods are created, and each pass has only a few creates queued at a time, so the
    one-pod job created after them gets its pod long before the gangs have all of theirs (queued behind
    them, it would get it after all 96)."""
    monkeypatch.setenv("DTJOB_MAX_CONCURRENT_PASSES", "1")
    monkeypatch.setenv("DTJOB_API_QPS", "20")
    monkeypatch.setenv("DTJOB_API_BURST", "1")

    def pods() -> list[str]:
        return [pod.metadata.name for pod in core.list_namespaced_pod(namespace).items]

    with running_operator(cluster_b, namespace):
        for n in range(3):
            jobs.create(pytorch_job(f"big-{n}", workers=32))
        wait_for(lambda: len(pods()) >= 4, "the big gangs' first pods", timeout=60)
        jobs.create(pytorch_job("small", workers=1))
        big_before_small = wait_for(
            lambda: (names := pods()) and "small-worker-0" in names and (len(names) - 1,),
            "the small job's pod",
            timeout=60,
            interval=0.05,
        )[0]
        wait_for(lambda: len(pods()) == 97, "every pod created", timeout=120)
    assert big_before_small < 48, f"{big_before_small} of the 96 big pods were created before the small one"


def test_kopf_run_namespace_alone_names_the_namespaces_the_operator_reads(
    cluster_b: Cluster,
    crd: dict[str, Any],
    objects: client.CustomObjectsApi,
    jobs: Jobs,
    core: client.CoreV1Api,
    namespace: str,
) -> None:
    # `running_operator` is `kopf run --standalone --namespace NAMESPACE`, with no DTJOB_NAMESPACES.
    other = f"{namespace}-other"
    create_namespace(core, other)
    try:
        elsewhere = Jobs(objects, core, other)
        # There first: a reader of every namespace would list it at start, before "here" exists.
        elsewhere.create(pytorch_job("elsewhere", workers=1))
        with running_operator(cluster_b, namespace):
            jobs.create(pytorch_job("here", workers=1))
            jobs.wait_pods("here", 1, phase="Running")
            jobs.wait_condition("here", "Running")
            assert "status" not in elsewhere.get("elsewhere")
            assert elsewhere.pods("elsewhere") == []
    finally:
        core.delete_namespace(other)

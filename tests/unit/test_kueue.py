"""A job in a Kueue queue, pass by pass (pure): the Workload it gets, no pod before admission, what the
admission adds to each pod, an eviction counted as a preemption, the quota handed back, Finished."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from dtjob.api import DistributedTrainingJobSpec
from dtjob.core import kueue, kueue_priority
from dtjob.core.frameworks import Gang
from dtjob.core.names import SPARE_LABEL, JobRef
from dtjob.core.observed import observe
from dtjob.core.plan import Plan
from dtjob.core.reconcile import refused_pods
from dtjob.core.workload import Readiness, gang_readiness, pods_ready, was_ready
from dtjob.core.world import Needs
from tests.support.builders import NOW, exited, pods_of, running, service_of, template
from tests.support.kueue import FLAVORS, JOB, QUEUED, workload
from tests.support.plan import after, applied, condition, needs_for, plan_for

WORKLOAD_NAME = kueue.workload_name(JobRef.of(QUEUED))


def queued_pass(job: dict[str, Any], children: list[dict[str, Any]], wl: dict[str, Any] | None) -> Plan:
    return plan_for(job, children, NOW, workload=wl, flavors=FLAVORS)


def test_a_queued_job_gets_a_workload_with_a_pod_set_per_role_and_no_pod() -> None:
    plan = queued_pass(QUEUED, [], None)
    assert plan.create == []
    assert plan.workload is not None
    assert plan.workload["metadata"]["name"] == WORKLOAD_NAME
    assert plan.workload["metadata"]["ownerReferences"][0]["uid"] == JOB["metadata"]["uid"]
    assert plan.workload["spec"]["queueName"] == "team-a-gpus"
    pod_sets = plan.workload["spec"]["podSets"]
    assert [(p["name"], p["count"]) for p in pod_sets] == [("master", 1), ("worker", 2)]
    limits = pod_sets[1]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8"  # what Kueue counts against the quota
    job = after(QUEUED, plan)
    assert job["status"]["phase"] == "Queued"
    assert condition(job, "Queued") is not None and "team-a-gpus" in condition(job, "Queued")["message"]


def test_a_workload_waiting_for_quota_keeps_the_job_queued_with_kueues_reason() -> None:
    job = after(QUEUED, queued_pass(QUEUED, [], None))
    waiting = workload(("QuotaReserved", "False"))
    plan = queued_pass(job, [], waiting)
    assert plan.create == [] and plan.workload is None
    job = after(job, plan)
    assert job["status"]["phase"] == "Queued"
    assert "QuotaReserved is False" in condition(job, "Queued")["message"]


def test_a_waiting_job_names_the_cluster_queue_its_local_queue_hands_it_to_or_that_there_is_none() -> None:
    job = after(QUEUED, queued_pass(QUEUED, [], None))
    waiting = workload(("QuotaReserved", "False"))
    routed = plan_for(job, [], NOW, workload=waiting, flavors=FLAVORS, routes={"team-a-gpus": "h100-pool"})
    message = condition(after(job, routed), "Queued")["message"]
    assert message.startswith("waiting in LocalQueue team-a-gpus (ClusterQueue h100-pool) for quota"), message
    astray = plan_for(job, [], NOW, workload=waiting, flavors=FLAVORS, routes={"other": "h100-pool"})
    message = condition(after(job, astray), "Queued")["message"]
    assert "LocalQueue team-a-gpus (no such LocalQueue in the job's namespace)" in message, message


def test_quota_reserved_but_a_check_pending_is_still_queued_and_names_the_check() -> None:
    pending_check = workload(
        ("QuotaReserved", "True"), admission=True,
        admissionChecks=[{"name": "dws-prov", "state": "Pending", "message": "waiting for capacity"}],
    )  # fmt: skip
    plan = queued_pass(QUEUED, [], pending_check)
    assert plan.create == []
    message = condition(after(QUEUED, plan), "Queued")["message"]
    assert "ClusterQueue gpus" in message and "dws-prov: Pending (waiting for capacity)" in message


def test_the_pods_of_a_queued_provisioning_request_tolerate_the_taint_of_its_nodes() -> None:
    """GKE taints DWS nodes cloud.google.com/gke-queued; Kueue's check gives the pods only annotations."""
    dws = {
        "name": "worker",
        "annotations": {
            "autoscaling.x-k8s.io/consume-provisioning-request": "pr-1",
            "autoscaling.x-k8s.io/provisioning-class-name": "queued-provisioning.gke.io",
        },
    }
    other = {"name": "worker", "annotations": {"autoscaling.x-k8s.io/consume-provisioning-request": "pr-1",
                                               "autoscaling.x-k8s.io/provisioning-class-name": "check-capacity.autoscaling.x-k8s.io"}}  # fmt: skip
    queued = {"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"}
    for update, tolerated in ((dws, True), (other, False)):
        admitted = workload(
            ("QuotaReserved", "True"), ("Admitted", "True"), admission=True,
            admissionChecks=[{"name": "dws-prov", "state": "Ready", "podSetUpdates": [update]}],
        )  # fmt: skip
        plan = queued_pass(QUEUED, [], admitted)
        workers = [p for p in plan.create if p["metadata"]["labels"]["training.dtjob.io/role"] == "Worker"]
        assert workers and all((queued in p["spec"]["tolerations"]) is tolerated for p in workers)
        master = next(p for p in plan.create if p["metadata"]["labels"]["training.dtjob.io/role"] == "Master")
        assert queued not in master["spec"]["tolerations"]  # its podSet got no request


def test_an_admitted_gang_is_created_whole_with_the_flavor_and_the_checks_updates() -> None:
    update = {"name": "worker", "annotations": {"cluster-autoscaler.kubernetes.io/consume-provisioning-request": "pr-1"},
              "nodeSelector": {"cloud.google.com/gke-queued": "true"}}  # fmt: skip
    admitted = workload(
        ("QuotaReserved", "True"), ("Admitted", "True"), admission=True,
        admissionChecks=[{"name": "dws-prov", "state": "Ready", "podSetUpdates": [update]}],
    )  # fmt: skip
    plan = queued_pass(QUEUED, [], admitted)
    assert applied(plan) == [
        "Service/mnist",
        "Pod/mnist-master-0",
        "Pod/mnist-worker-0",
        "Pod/mnist-worker-1",
    ]
    for pod in plan.create:
        meta, spec = pod["metadata"], pod["spec"]
        role = meta["labels"]["training.dtjob.io/role"].lower()
        assert meta["labels"][kueue.POD_SET_LABEL] == role
        assert meta["annotations"][kueue.WORKLOAD_ANNOTATION] == WORKLOAD_NAME
        assert spec["nodeSelector"]["cloud.google.com/gke-nodepool"] == "h100-pool"
        assert spec["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"
        assert {"key": "reserved", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        queued_node = spec["nodeSelector"].get("cloud.google.com/gke-queued")
        assert queued_node == ("true" if role == "worker" else None)
    job = after(QUEUED, plan)
    assert (
        condition(job, "Admitted")["status"] == "True"
        and "ClusterQueue gpus" in condition(job, "Admitted")["message"]
    )
    assert condition(job, "Queued") is None  # never queued in the status: admitted at its first look


def test_an_admission_whose_flavor_is_not_read_yet_waits_for_it() -> None:
    admitted = workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True)
    plan = plan_for(QUEUED, [], NOW, workload=admitted, flavors={})
    assert plan.create == []
    assert "ResourceFlavor h100" in condition(after(QUEUED, plan), "Queued")["message"]


def test_checks_that_disagree_on_a_label_hold_the_gang_and_say_so() -> None:
    checks = [
        {"name": name, "state": "Ready", "podSetUpdates": [{"name": "worker", "labels": {"zone": zone}}]}
        for name, zone in (("a", "1"), ("b", "2"))
    ]
    admitted = workload(
        ("QuotaReserved", "True"), ("Admitted", "True"), admission=True, admissionChecks=checks
    )
    plan = queued_pass(QUEUED, [], admitted)
    assert plan.create == []
    assert "admission check b sets labels zone=2" in condition(after(QUEUED, plan), "Queued")["message"]


def running_gang() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    admitted = workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True)
    job = after(QUEUED, queued_pass(QUEUED, [], admitted))
    children = [service_of(QUEUED), *(running(p) for p in pods_of(QUEUED).values())]
    job = after(job, queued_pass(job, children, admitted))
    assert job["status"]["phase"] == "Running"
    return job, children


def test_an_eviction_past_max_preemptions_fails_the_job_and_finishes_its_workload() -> None:
    """Kueue's evictions count as preemptions, so runPolicy.maxPreemptions applies to them as to any other."""
    job, children = running_gang()
    job = {**job, "spec": {**job["spec"], "runPolicy": {"maxPreemptions": 0}}}
    evicted = workload(("QuotaReserved", "True"), ("Admitted", "True"), ("Evicted", "True"), admission=True)
    plan = queued_pass(job, children, evicted)
    job = after(job, plan)
    failed = condition(job, "Failed")
    assert (job["status"]["phase"], failed["reason"]) == ("Failed", "MaxPreemptionsExceeded")
    assert failed["message"] == "maxPreemptions (0) reached; last: evicted by Kueue: Evicted is True"
    assert job["status"]["restarts"]["preemptions"] == 0 and job["status"]["attempt"] == 1
    # Its quota is the pods': the Workload is Finished once they are gone, not while they are deleted.
    assert plan.workload_status is None and len(plan.delete) == 3
    gone = queued_pass(job, [service_of(QUEUED)], evicted)
    assert gone.workload_status is not None
    assert condition(gone.workload_status, "Finished")["status"] == "True"


def test_an_eviction_deletes_the_gang_counts_a_preemption_and_waits_for_readmission() -> None:
    job, children = running_gang()
    evicted = workload(("QuotaReserved", "True"), ("Admitted", "True"), ("Evicted", "True"), admission=True)
    plan = queued_pass(job, children, evicted)
    assert plan.create == [] and plan.workload_status is None  # the quota goes back once the pods are gone
    job = after(job, plan)
    assert job["status"]["restarts"] == {"failures": 0, "preemptions": 1, "total": 1}
    assert "evicted by Kueue: Evicted is True" in job["status"]["lastRestart"]["message"]
    plan = queued_pass(job, children, evicted)  # the restart recorded: the old gang goes
    assert sorted(d.name for d in plan.delete) == ["mnist-master-0", "mnist-worker-0", "mnist-worker-1"]
    assert plan.create == [] and plan.workload_status is None
    job = after(job, plan)

    # The pods gone: the admission is cleared (a preemption's Workload is requeued), nothing created.
    plan = queued_pass(job, [service_of(QUEUED)], evicted)
    assert plan.create == []
    assert plan.workload_status is not None
    assert plan.workload_status["metadata"] == {"name": WORKLOAD_NAME, "resourceVersion": "7"}
    status = plan.workload_status["status"]
    assert status["admission"] is None
    kinds = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert kinds["QuotaReserved"] == ("False", "Pending") and kinds["Evicted"] == ("True", "Evicted")
    job = after(job, plan)
    assert job["status"]["phase"] == "Queued"
    assert job["status"]["restarts"]["preemptions"] == 1  # counted once


def test_a_finished_job_marks_its_workload_finished_once() -> None:
    job, children = running_gang()
    admitted = workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True)
    done = [exited(c, 0) if c["metadata"]["name"] == "mnist-master-0" else c for c in children]
    plan = queued_pass(job, done, admitted)
    # The workers still run (cleanPodPolicy deletes them): their quota is held until they are gone.
    assert plan.workload_status is None and sorted(d.name for d in plan.delete) == [
        "mnist-worker-0",
        "mnist-worker-1",
    ]
    job = after(job, plan)
    assert job["status"]["phase"] == "Succeeded"
    left = [c for c in done if c["metadata"]["name"] not in ("mnist-worker-0", "mnist-worker-1")]
    plan = queued_pass(job, left, admitted)
    assert plan.workload_status is not None
    finished = [c for c in plan.workload_status["status"]["conditions"] if c["type"] == "Finished"]
    assert [(c["status"], c["reason"]) for c in finished] == [("True", "Succeeded")]
    marked = workload(("QuotaReserved", "True"), ("Admitted", "True"), ("Finished", "True"), admission=True)
    assert queued_pass(job, left, marked).workload_status is None


def test_a_failed_jobs_pods_left_running_keep_its_quota_until_they_end() -> None:
    """cleanPodPolicy None keeps a finished job's running pods, and with them the GPUs: Kueue's quota is
    the pods', so the Workload is Finished only once the last of them has ended."""
    job, children = running_gang()
    job = {
        **job,
        "spec": {
            **job["spec"],
            "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 0, "failureSettleSeconds": 0},
        },
    }
    admitted = workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True)
    failed = [exited(c, 1) if c["metadata"]["name"] == "mnist-worker-1" else c for c in children]
    plan = queued_pass(job, failed, admitted)
    job = after(job, plan)
    assert job["status"]["phase"] == "Failed" and plan.delete == []
    assert plan.workload_status is None
    assert queued_pass(job, failed, admitted).workload_status is None  # still running: still held
    ended = [exited(c, 1) if c["metadata"]["name"] != "mnist" else c for c in failed]
    plan = queued_pass(job, ended, admitted)
    assert plan.workload_status is not None
    finished = [c for c in plan.workload_status["status"]["conditions"] if c["type"] == "Finished"]
    assert [(c["status"], c["reason"]) for c in finished] == [("True", "Failed")]


def finished_by_kueue(*conditions: tuple[str, str], admission: bool) -> dict[str, Any]:
    """The Workload as Kueue's jobframework leaves one that cannot start (workloadfinish.Finish)."""
    marked = workload(*conditions, ("Finished", "True"), admission=admission)
    (finished,) = [c for c in marked["status"]["conditions"] if c["type"] == "Finished"]
    finished.update(reason="FailedToStart", message="invalid podSet update")
    return marked


def test_a_workload_finished_by_kueue_before_admission_fails_the_queued_job_with_kueues_reason() -> None:
    job = after(QUEUED, queued_pass(QUEUED, [], None))
    plan = queued_pass(job, [service_of(QUEUED)], finished_by_kueue(admission=False))
    assert plan.create == [] and plan.workload_status is None  # nothing to mark: it is Finished already
    job = after(job, plan)
    assert job["status"]["phase"] == "Failed"
    failed = condition(job, "Failed")
    assert failed["reason"] == "WorkloadFinished"
    assert failed["message"].endswith(
        "marked Finished before the job ended: FailedToStart: invalid podSet update"
    )


def test_a_workload_finished_under_a_running_gang_ends_it_and_takes_every_pod_whatever_clean_pod_policy() -> (
    None
):
    job, children = running_gang()
    job["spec"]["runPolicy"] = {**job["spec"].get("runPolicy", {}), "cleanPodPolicy": "None"}
    marked = finished_by_kueue(("QuotaReserved", "True"), ("Admitted", "True"), admission=True)
    job = after(job, queued_pass(job, children, marked))
    assert (job["status"]["phase"], condition(job, "Failed")["reason"]) == ("Failed", "WorkloadFinished")
    # Its quota is gone: the pods may not go on using it, even under cleanPodPolicy None.
    plan = queued_pass(job, children, marked)
    assert sorted(d.name for d in plan.delete) == ["mnist-master-0", "mnist-worker-0", "mnist-worker-1"]
    assert plan.workload_status is None


def test_a_job_naming_a_queue_never_runs_around_kueue_when_the_operator_found_none() -> None:
    plan = plan_for(QUEUED, [], NOW, kueue_served=False)
    assert plan.create == [] and plan.workload is None
    assert "install Kueue, then restart the operator" in condition(after(QUEUED, plan), "Queued")["message"]


def test_a_job_without_a_queue_is_untouched_by_kueue() -> None:
    plan = plan_for(JOB, [], NOW, kueue_served=False)
    assert plan.workload is None and len(plan.create) == 3


def test_the_workload_carries_the_value_of_the_priority_class_the_job_names() -> None:
    labels = {kueue.QUEUE_LABEL: "team-a-gpus", kueue_priority.PRIORITY_CLASS_LABEL: "high"}
    job = {**QUEUED, "metadata": {**QUEUED["metadata"], "labels": labels}}
    # Nothing is decided until it is read.
    assert needs_for(job, [], NOW) == Needs(
        priority=kueue_priority.Priority(kueue_priority.WORKLOAD_PRIORITY_SOURCE, "high")
    )
    plan = plan_for(
        job, [], NOW, priority=kueue_priority.Priority(kueue_priority.WORKLOAD_PRIORITY_SOURCE, "high", 1000)
    )
    assert plan.workload is not None
    spec = plan.workload["spec"]
    assert (spec["priorityClassName"], spec["priorityClassSource"], spec["priority"]) == (
        "high", "kueue.x-k8s.io/workloadpriorityclass", 1000)  # fmt: skip
    missing = plan_for(
        job, [], NOW, priority=kueue_priority.Priority(kueue_priority.WORKLOAD_PRIORITY_SOURCE, "high")
    )
    assert missing.workload is None and missing.requeue_after == 30.0
    assert "priority class high" in condition(after(job, missing), "Invalid")["message"]


def test_a_priority_class_label_changed_while_the_job_waits_reaches_its_workload_but_not_once_it_holds_quota() -> (
    None
):
    """As Kueue's integrations follow the label while the job is not admitted (the class is immutable
    once quota is reserved)."""

    def labelled(priority: str) -> dict[str, Any]:
        labels = {kueue.QUEUE_LABEL: "team-a-gpus", kueue_priority.PRIORITY_CLASS_LABEL: priority}
        return {**QUEUED, "metadata": {**QUEUED["metadata"], "labels": labels}}

    low = kueue_priority.Priority(kueue_priority.WORKLOAD_PRIORITY_SOURCE, "low", 10)
    made = plan_for(labelled("low"), [], NOW, priority=low).workload
    assert made is not None
    pending = {**workload(("QuotaReserved", "False")), "spec": made["spec"]}
    high = kueue_priority.Priority(kueue_priority.WORKLOAD_PRIORITY_SOURCE, "high")
    assert needs_for(labelled("high"), [], NOW, workload=pending, flavors=FLAVORS) == Needs(priority=high)
    plan = plan_for(
        labelled("high"), [], NOW, workload=pending, flavors=FLAVORS, priority=replace(high, value=1000)
    )
    assert plan.workload_spec is not None
    assert plan.workload_spec["metadata"]["resourceVersion"] == "7"
    assert {k: plan.workload_spec["spec"][k] for k in ("priorityClassName", "priorityClassSource", "priority")} == {
        "priorityClassName": "high", "priorityClassSource": kueue_priority.WORKLOAD_PRIORITY_SOURCE, "priority": 1000}  # fmt: skip
    # Unchanged, or held: nothing to read, nothing written.
    assert queued_pass(labelled("low"), [], pending).workload_spec is None
    admitted = {
        **workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True),
        "spec": made["spec"],
    }
    assert plan_for(labelled("high"), [], NOW, workload=admitted, flavors=FLAVORS).workload_spec is None


def test_without_a_workload_priority_class_the_pods_priority_class_is_the_workloads() -> None:
    pods = list(pods_of(QUEUED).values())
    pods[0]["spec"]["priorityClassName"] = "batch-high"
    assert kueue_priority.priority_class_of(QUEUED, pods) == kueue_priority.Priority(
        kueue_priority.POD_PRIORITY_SOURCE, "batch-high"
    )
    assert (
        kueue_priority.priority_class_of(QUEUED, list(pods_of(QUEUED).values()))
        == kueue_priority.GLOBAL_DEFAULT_PRIORITY
    )


def test_a_job_naming_no_priority_class_gets_the_clusters_global_default_as_kueue_gives_it() -> None:
    """Kueue's integrations give a Workload that names no class the globalDefault PriorityClass (its name,
    source and value); dtjob sent 0, which ranked its gangs below everyone's and preempted them first."""
    assert needs_for(QUEUED, [], NOW, priority=None) == Needs(priority=kueue_priority.GLOBAL_DEFAULT_PRIORITY)
    default = kueue_priority.Priority(
        kueue_priority.POD_PRIORITY_SOURCE, "cluster-default", 500, global_default=True
    )
    workload = plan_for(QUEUED, [], NOW, priority=default).workload
    assert workload is not None
    spec = workload["spec"]
    assert (spec["priorityClassName"], spec["priorityClassSource"], spec["priority"]) == (
        "cluster-default", "scheduling.k8s.io/priorityclass", 500)  # fmt: skip
    none = plan_for(QUEUED, [], NOW).workload  # no globalDefault class in the cluster: no priority, 0
    assert none is not None and "priority" not in none["spec"] and "priorityClassName" not in none["spec"]


def test_of_several_global_default_priority_classes_the_lowest_is_the_workloads_as_kueue_takes_it() -> None:
    """The apiserver lets two PriorityClasses be globalDefault (a race); Kueue then takes the lowest value."""
    classes = [("system-node-critical", 2000001000, False), ("batch", 100, True), ("low", -5, True),
               ("also-low", -5, True)]  # fmt: skip
    assert kueue_priority.global_default_priority(classes) == kueue_priority.Priority(
        kueue_priority.POD_PRIORITY_SOURCE, "low", -5, global_default=True
    )
    assert kueue_priority.global_default_priority([("batch", 100, False)]) == kueue_priority.Priority(
        kueue_priority.POD_PRIORITY_SOURCE, "", 0, global_default=True
    )
    assert kueue_priority.global_default_priority([]).answers(kueue_priority.GLOBAL_DEFAULT_PRIORITY)


def test_suspending_deactivates_the_workload_and_resuming_queues_it_again() -> None:
    job, children = running_gang()
    suspended = {**job, "spec": {**job["spec"], "runPolicy": {"suspend": True}}}
    admitted = workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True)
    plan = queued_pass(suspended, children, admitted)
    assert plan.workload_spec == {
        "metadata": {"name": admitted["metadata"]["name"]},
        "spec": {"active": False},
    }
    assert sorted(d.name for d in plan.delete) == ["mnist-master-0", "mnist-worker-0", "mnist-worker-1"]
    suspended = after(suspended, plan)
    assert suspended["status"]["phase"] == "Suspended"
    assert suspended["status"]["restarts"]["total"] == 0  # a suspension is not a restart
    # Kueue evicts the inactive Workload; once the pods are gone its quota is handed back.
    inactive = workload(("QuotaReserved", "True"), ("Evicted", "True"), admission=True)
    inactive["spec"]["active"] = False
    plan = queued_pass(suspended, [service_of(QUEUED)], inactive)
    assert plan.workload_spec is None and plan.create == []
    assert plan.workload_status is not None and plan.workload_status["status"]["admission"] is None
    resumed = {**suspended, "spec": {**suspended["spec"], "runPolicy": {"suspend": False}}}
    cleared = workload(("QuotaReserved", "False"), ("Evicted", "True"))
    cleared["spec"]["active"] = False
    plan = queued_pass(resumed, [service_of(QUEUED)], cleared)
    assert plan.workload_spec is not None and plan.workload_spec["spec"] == {"active": True}
    assert plan.create == []
    assert after(resumed, plan)["status"]["phase"] == "Queued"


def test_a_roles_topology_annotation_becomes_its_pod_sets_request_ranked() -> None:
    replicas = [dict(r) for r in QUEUED["spec"]["replicas"]]
    annotations = {kueue.TOPOLOGY_ANNOTATIONS["required"]: "cloud.google.com/gce-topology-block"}
    replicas[1] = {
        **replicas[1],
        "template": {**replicas[1]["template"], "metadata": {"annotations": annotations}},
    }
    job = {**QUEUED, "spec": {**QUEUED["spec"], "replicas": replicas}}
    plan = queued_pass(job, [], None)
    assert plan.workload is not None
    master, worker = plan.workload["spec"]["podSets"]
    assert "topologyRequest" not in master
    assert worker["topologyRequest"] == {
        "required": "cloud.google.com/gce-topology-block",
        "podIndexLabel": "training.dtjob.io/replica-index",
    }
    admitted = workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True)
    admitted["status"]["admission"]["podSetAssignments"][1]["topologyAssignment"] = {
        "levels": [],
        "domains": [],
    }
    pods = {p["metadata"]["name"]: p for p in queued_pass(job, [], admitted).create}
    assert pods["mnist-worker-0"]["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/topology"}]
    assert "schedulingGates" not in pods["mnist-master-0"]["spec"]


def with_topology(job: dict[str, Any], *roles: int) -> dict[str, Any]:
    """`job` with the roles at these positions asking Kueue for one topology block."""
    annotations = {kueue.TOPOLOGY_ANNOTATIONS["required"]: "cloud.google.com/gce-topology-block"}
    replicas = [
        {**r, "template": {**r["template"], "metadata": {"annotations": annotations}}} if i in roles else r
        for i, r in enumerate(job["spec"]["replicas"])
    ]
    return {**job, "spec": {**job["spec"], "replicas": replicas}}


def test_roles_asking_for_one_topology_and_scheduled_alike_are_one_pod_set_of_the_whole_gang_by_rank() -> (
    None
):
    job = with_topology(QUEUED, 0, 1)
    plan = queued_pass(job, [], None)
    assert plan.workload is not None
    (gang,) = plan.workload["spec"]["podSets"]
    assert (gang["name"], gang["count"]) == ("gang", 3)
    assert gang["topologyRequest"] == {
        "required": "cloud.google.com/gce-topology-block",
        "podIndexLabel": "training.dtjob.io/rank",
    }
    admitted = workload(("QuotaReserved", "True"), ("Admitted", "True"))
    admitted["status"]["admission"] = {
        "clusterQueue": "gpus",
        "podSetAssignments": [{"name": "gang", "flavors": {"nvidia.com/gpu": "h100"}, "count": 3,
                               "topologyAssignment": {"levels": [], "domains": []}}],
    }  # fmt: skip
    pods = queued_pass(job, [], admitted).create
    # Every pod, the Master's too, is the gang podSet's: gated until Kueue's ungater places it by rank.
    assert {p["metadata"]["name"]: p["metadata"]["labels"]["training.dtjob.io/rank"] for p in pods} == {
        "mnist-master-0": "0", "mnist-worker-0": "1", "mnist-worker-1": "2"
    }  # fmt: skip
    for pod in pods:
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "gang"
        assert pod["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/topology"}]
        assert pod["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"] == "h100-pool"


def test_the_jobs_provisioning_request_parameters_reach_its_workload_and_no_other_annotation() -> None:
    annotations = {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "600", "team.example.com/owner": "ml"}
    job = {**QUEUED, "metadata": {**QUEUED["metadata"], "annotations": annotations}}
    plan = queued_pass(job, [], None)
    assert plan.workload is not None
    assert {
        k: v for k, v in plan.workload["metadata"]["annotations"].items() if k != kueue.POD_SETS_ANNOTATION
    } == {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "600"}


def test_pods_placed_by_implicit_tas_say_so_and_those_asked_for_a_topology_need_not() -> None:
    """A ClusterQueue of TAS flavors only places a gang that asked for nothing (implicit TAS): Kueue's
    ungater then takes only pods annotated unconstrained, as Kueue's own integrations annotate them."""
    unconstrained = kueue.UNCONSTRAINED_TOPOLOGY_ANNOTATION
    for job, marked in ((QUEUED, True), (with_topology(QUEUED, 0, 1), False)):
        plan = queued_pass(job, [], None)
        assert plan.workload is not None
        admitted = {
            **plan.workload,
            "status": workload(("QuotaReserved", "True"), ("Admitted", "True"))["status"],
        }
        admitted["status"]["admission"] = {
            "clusterQueue": "gpus",
            "podSetAssignments": [
                {"name": ps["name"], "flavors": {"nvidia.com/gpu": "h100"}, "count": ps["count"],
                 "topologyAssignment": {"levels": ["kubernetes.io/hostname"], "domains": []}}
                for ps in plan.workload["spec"]["podSets"]
            ],
        }  # fmt: skip
        pods = queued_pass(job, [], admitted).create
        assert len(pods) == 3
        for pod in pods:
            assert pod["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/topology"}]
            assert (pod["metadata"]["annotations"].get(unconstrained) == "true") is marked, pod["metadata"]


def test_a_workload_of_the_previous_release_with_a_pod_set_per_role_still_places_each_roles_pods() -> None:
    """Admitted before the upgrade (a podSet per role, ranked by replica-index): the pods the new
    operator creates for it take their own role's podSet, not a gang podSet the Workload does not have."""
    job = with_topology(QUEUED, 0, 1)
    admitted = workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True)
    admitted["status"]["admission"]["podSetAssignments"][1]["topologyAssignment"] = {
        "levels": [],
        "domains": [],
    }
    pods = {p["metadata"]["name"]: p for p in queued_pass(job, [], admitted).create}
    assert {name: p["metadata"]["labels"]["kueue.x-k8s.io/podset"] for name, p in pods.items()} == {
        "mnist-master-0": "master", "mnist-worker-0": "worker", "mnist-worker-1": "worker"
    }  # fmt: skip
    assert pods["mnist-worker-0"]["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/topology"}]
    assert "schedulingGates" not in pods["mnist-master-0"]["spec"]


def test_roles_scheduled_differently_keep_a_pod_set_each_even_when_both_ask_for_a_topology() -> None:
    job = with_topology(QUEUED, 0, 1)
    replicas = [dict(r) for r in job["spec"]["replicas"]]
    master_spec = {**replicas[0]["template"]["spec"], "nodeSelector": {"pool": "cpu-only"}}
    replicas[0] = {**replicas[0], "template": {**replicas[0]["template"], "spec": master_spec}}
    plan = queued_pass({**job, "spec": {**job["spec"], "replicas": replicas}}, [], None)
    assert plan.workload is not None
    assert [(s["name"], s["count"], s["topologyRequest"]["podIndexLabel"]) for s in plan.workload["spec"]["podSets"]] == [
        ("master", 1, "training.dtjob.io/replica-index"), ("worker", 2, "training.dtjob.io/replica-index")
    ]  # fmt: skip


def test_a_workload_kueue_deactivated_stays_inactive_and_the_job_says_why() -> None:
    rejected = workload(
        ("QuotaReserved", "False"),
        admissionChecks=[{"name": "dws-prov", "state": "Rejected", "message": "no capacity in us-central1"}],
    )
    rejected["spec"]["active"] = False
    plan = queued_pass(QUEUED, [], rejected)
    assert plan.workload_spec is None and plan.create == []
    message = condition(after(QUEUED, plan), "Queued")["message"]
    assert "Kueue deactivated it (admission check dws-prov: no capacity in us-central1)" in message


def with_reason(wl: dict[str, Any], type_: str, status: str, reason: str) -> dict[str, Any]:
    """`wl` with its condition `type_` replaced by one of `status` and `reason` (Kueue's reasons differ
    from the types: PodsReady's Started, WaitForRecovery; an eviction's PodsReadyTimeout)."""
    conditions = [c for c in wl["status"]["conditions"] if c["type"] != type_]
    conditions.append(
        {"type": type_, "status": status, "reason": reason, "message": "", "lastTransitionTime": "x"}
    )
    return {**wl, "status": {**wl["status"], "conditions": conditions}}


def pods_ready_written(plan: Plan) -> tuple[str, str] | None:
    if plan.workload_status is None:
        return None
    return next(
        (
            (c["status"], c["reason"])
            for c in plan.workload_status["status"]["conditions"]
            if c["type"] == "PodsReady"
        ),
        None,
    )


def test_an_admitted_gang_tells_kueue_its_pods_are_ready_once_every_member_is_and_when_one_is_lost() -> None:
    """Kueue's waitForPodsReady evicts an admitted Workload whose PodsReady is not True by the timeout;
    dtjob keeps the condition as Kueue's own job integrations do (jobframework's generatePodsReadyCondition)."""
    job, children = running_gang()
    admitted = workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True)
    starting = [running(c, ready=False) if c["metadata"]["name"] == "mnist-worker-1" else c for c in children]
    assert pods_ready_written(queued_pass(job, starting, admitted)) is None  # Kueue times it from admission
    plan = queued_pass(job, children, admitted)
    assert pods_ready_written(plan) == ("True", "Started")
    assert plan.workload_status is not None and plan.workload_status["metadata"]["resourceVersion"] == "7"
    ready = with_reason(admitted, "PodsReady", "True", "Started")
    assert queued_pass(job, children, ready).workload_status is None  # written once
    # A member lost under a ready gang: waiting for recovery (Kueue's recoveryTimeout counts from then).
    assert pods_ready_written(queued_pass(job, starting, ready)) == ("False", "WaitForRecovery")
    recovering = with_reason(admitted, "PodsReady", "False", "WaitForRecovery")
    assert queued_pass(job, starting, recovering).workload_status is None
    assert pods_ready_written(queued_pass(job, children, recovering)) == ("True", "Recovered")
    # A gang ending: rank 0 succeeded, a worker leaving Ready on its way out is no loss to recover from.
    ending = [
        exited(c, 0) if c["metadata"]["name"] == "mnist-master-0" else running(c, ready=False)
        for c in children
    ]
    assert pods_ready_written(queued_pass(job, ending, ready)) is None  # kept as it was
    # Every trainer exited 0, the kubelet not yet past Ready=False to the phase Succeeded: ending too.
    leaving = [
        {
            **c,
            "status": {
                **c["status"],
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "False"}],
            },
        }
        for c in (exited(c, 0) for c in children)
    ]
    assert pods_ready_written(queued_pass(job, leaving, ready)) in (None, ("True", "Started"))


def readiness(
    children: list[dict[str, Any]], attempt: int = 1, needed: int = 3, started: bool = False
) -> Readiness:
    spec = DistributedTrainingJobSpec.model_validate(QUEUED["spec"])
    observed = observe(children, NOW)
    kept = observed.not_of_attempt(attempt)  # as an in-place restart keeps them
    return gang_readiness(Gang.of(JobRef.of(QUEUED), spec, attempt), observed, needed, kept, started)


def relabelled_pod(pod: dict[str, Any], **labels: str) -> dict[str, Any]:
    return {**pod, "metadata": {**pod["metadata"], "labels": {**pod["metadata"]["labels"], **labels}}}


def test_the_gang_is_ready_as_kueue_counts_ready_and_succeeded_pods_against_what_it_needs() -> None:
    """A batch Job is ready at `ready + succeeded >= parallelism`; so is a gang, of its members."""
    pods = pods_of(QUEUED)
    master, worker0, worker1 = (pods[n] for n in ("mnist-master-0", "mnist-worker-0", "mnist-worker-1"))
    assert readiness([running(master), running(worker0), running(worker1)]) == Readiness.READY
    assert readiness([running(master), running(worker0), worker1]) == Readiness.NOT_READY
    # One member done while the others never started: ending, not ready (before, it made the gang ready,
    # and Kueue's timeout never evicted a gang that could not start).
    assert readiness([exited(master, 0), worker0, worker1]) == Readiness.ENDING
    assert readiness([exited(master, 0), exited(worker0, 0), running(worker1)]) == Readiness.READY
    # An elastic gang trains at its minimum.
    assert readiness([running(master), running(worker0), worker1], needed=2) == Readiness.READY


def test_an_in_place_restart_or_a_spare_taking_a_rank_is_no_loss_of_readiness() -> None:
    """The pods an in-place restart keeps carry the old attempt's label for a pass; a spare takes a lost
    member's rank before its pod is relabelled. Neither may flip PodsReady to WaitForRecovery, which under
    blockAdmission holds every other admission."""
    pods = pods_of(QUEUED)
    master, worker0, worker1 = (pods[n] for n in ("mnist-master-0", "mnist-worker-0", "mnist-worker-1"))
    kept = [running(master), running(worker0), running(worker1)]
    assert readiness(kept, attempt=2) == Readiness.READY
    spare = running(relabelled_pod(worker1, **{SPARE_LABEL: "true"}))
    spare["metadata"] = {**spare["metadata"], "name": "mnist-worker-spare-0"}
    taking_over = [running(master), running(worker0), spare]
    assert readiness(taking_over, started=True) == Readiness.READY
    assert readiness(taking_over, started=False) == Readiness.NOT_READY  # spares are not awaited to start
    ready = with_reason(workload(("Admitted", "True"), admission=True), "PodsReady", "True", "Started")
    assert pods_ready(ready, readiness(taking_over, started=was_ready(ready)), "now") is None
    assert pods_ready(ready, Readiness.ENDING, "now") is None


def test_an_evicted_gang_hands_its_quota_back_with_pods_ready_false_so_the_next_admission_is_timed_anew() -> (
    None
):
    job, children = running_gang()
    evicted = workload(("QuotaReserved", "True"), ("Admitted", "True"), ("Evicted", "True"), admission=True)
    evicted = with_reason(evicted, "PodsReady", "True", "Started")
    job = after(job, queued_pass(job, children, evicted))
    job = after(job, queued_pass(job, children, evicted))  # the restart recorded, the gang deleted
    assert pods_ready_written(queued_pass(job, [service_of(QUEUED)], evicted)) == ("False", "WaitForStart")


@pytest.mark.parametrize(
    ("reason", "active"),
    [
        pytest.param(kueue.PODS_READY_TIMEOUT, True, id="the PodsReady timeout"),
        pytest.param("ClusterQueueStopped", True, id="a ClusterQueue stopped with HoldAndDrain"),
        pytest.param("LocalQueueStopped", True, id="a LocalQueue stopped with HoldAndDrain"),
        pytest.param("InactiveWorkload", False, id="deactivated (Kueue before v0.9)"),
        pytest.param("Deactivated", False, id="deactivated"),
        pytest.param("DeactivatedDueToRequeuingLimitExceeded", False, id="past the requeuing limit"),
        pytest.param("Preempted", False, id="preempted, then deactivated by a user"),
    ],
)
def test_an_eviction_for_kueues_own_reasons_is_a_requeue_charged_to_no_budget(
    reason: str, active: bool
) -> None:
    """Kueue bounds these evictions itself (waitForPodsReady's requeuingStrategy backs a gang that does
    not get ready off and deactivates its Workload after backoffLimitCount; a drained queue is an
    administrator's; a deactivation is a user's or Kueue's): maxPreemptions is not spent on them, and the
    restart says what it was."""
    job, children = running_gang()
    job = {**job, "spec": {**job["spec"], "runPolicy": {"maxPreemptions": 0}}}
    evicted = workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True)
    evicted = with_reason(evicted, "Evicted", "True", reason)
    evicted["spec"]["active"] = active
    job = after(job, queued_pass(job, children, evicted))
    status = job["status"]
    assert status["phase"] == "Restarting", status
    assert status["restarts"] == {"failures": 0, "preemptions": 0, "requeues": 1, "total": 1}
    assert (status["lastRestart"]["reason"], condition(job, "Restarting")["reason"]) == (
        "Requeued",
        "Requeued",
    )
    assert status["lastRestart"]["message"].startswith("evicted by Kueue")


def test_an_evicted_gang_hands_its_quota_back_only_once_its_spares_are_gone_too() -> None:
    """Spares hold what members hold, and the Workload counts them: the quota goes back with the last."""
    replicas = [{"role": "Worker", "count": 2, "spares": 1, "template": template()}]
    spared = {
        **QUEUED,
        "spec": {
            **QUEUED["spec"],
            "replicas": replicas,
            "runPolicy": {"restartStrategy": "InPlace"},
            "torch": {"nprocPerNode": 1},
        },
    }
    admitted = workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True)
    job = after(spared, queued_pass(spared, [], admitted))
    members = [running(p) for p in pods_of(spared).values()]
    plan = queued_pass(job, [service_of(spared), *members], admitted)
    spare = next(p for p in plan.create if p["metadata"]["labels"].get(SPARE_LABEL) == "true")
    evicted = workload(("QuotaReserved", "True"), ("Admitted", "True"), ("Evicted", "True"), admission=True)
    plan = queued_pass(job, [service_of(spared), running(spare)], evicted)
    assert [d.name for d in plan.delete] == [spare["metadata"]["name"]] and plan.workload_status is None
    cleared = queued_pass(job, [service_of(spared)], evicted).workload_status
    assert cleared is not None and cleared["status"]["admission"] is None


def test_a_job_whose_pods_are_refused_after_admission_finishes_its_workload_failed_to_start() -> None:
    """As Kueue's jobframework does for a job that cannot start: the quota is not held by a job with no pod."""
    job, children = running_gang()
    job = after(job, refused_pods(job, 'pods "mnist-worker-0" is forbidden: violates PodSecurity', NOW))
    admitted = workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True)
    plan = queued_pass(job, children, admitted)
    assert (
        plan.workload_status is not None
        and condition(plan.workload_status, "Finished")["reason"] == "FailedToStart"
    )
    assert "violates PodSecurity" in condition(plan.workload_status, "Finished")["message"]
    assert len(plan.delete) == len(children) - 1  # the pods go (the Service stays)
    finished = with_reason(admitted, "Finished", "True", "FailedToStart")
    assert queued_pass(job, [], finished).workload_status is None  # once


def test_a_queue_label_that_cannot_name_a_local_queue_makes_the_job_invalid_naming_it() -> None:
    bad = {**QUEUED, "metadata": {**QUEUED["metadata"], "labels": {kueue.QUEUE_LABEL: "Team_A"}}}
    plan = queued_pass(bad, [], None)
    assert plan.workload is None and plan.create == []
    invalid = condition(after(bad, plan), "Invalid")
    assert invalid["status"] == "True" and "kueue.x-k8s.io/queue-name" in invalid["message"], invalid
    assert "'Team_A' cannot name a LocalQueue" in invalid["message"]


def test_an_invalid_jobs_waiting_workload_is_deactivated_and_active_again_once_the_job_is_valid() -> None:
    """An invalid job makes no pods: its Workload, left waiting, could be admitted and hold quota for
    nothing. Whatever makes it invalid (a queue label that names no LocalQueue, a spec that does not parse),
    a Workload waiting for quota is deactivated, and active again once the job is valid; one holding quota
    is left to its gang."""
    pending = workload(("QuotaReserved", "False"))
    bad_label = {**QUEUED, "metadata": {**QUEUED["metadata"], "labels": {kueue.QUEUE_LABEL: "Team_A"}}}
    unparsed = {**QUEUED, "spec": {**QUEUED["spec"], "replicas": []}}
    for invalid_job in (bad_label, unparsed):
        plan = queued_pass(invalid_job, [], pending)
        assert plan.workload_spec == {"metadata": {"name": WORKLOAD_NAME}, "spec": {"active": False}}, (
            invalid_job
        )
        assert condition(after(invalid_job, plan), "Invalid")["status"] == "True"
    held = workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True)
    assert queued_pass(unparsed, [], held).workload_spec is None
    inactive = {**pending, "spec": {**pending["spec"], "active": False}}
    assert queued_pass(unparsed, [], inactive).workload_spec is None  # written once
    was_invalid = after(unparsed, queued_pass(unparsed, [], pending))
    fixed = {**was_invalid, "spec": QUEUED["spec"]}
    plan = queued_pass(fixed, [], inactive)
    assert plan.workload_spec is not None and plan.workload_spec["spec"]["active"] is True


def test_time_spent_back_in_the_queue_does_not_count_toward_the_active_deadline() -> None:
    """As for a Job Kueue suspends: activeDeadlineSeconds counts from the start after the re-admission."""
    job, children = running_gang()
    assert job["status"]["startTime"]
    evicted = workload(("QuotaReserved", "True"), ("Admitted", "True"), ("Evicted", "True"), admission=True)
    job = after(job, queued_pass(job, children, evicted))
    job = after(job, queued_pass(job, children, evicted))  # the gang deleted
    requeued = workload(("QuotaReserved", "False"), ("Admitted", "False"))
    job = after(job, queued_pass(job, [service_of(QUEUED)], requeued))
    assert job["status"]["phase"] == "Queued" and not job["status"].get("startTime"), job["status"]


def test_the_workload_is_named_as_kueue_names_its_own_integrations_workloads() -> None:
    """The kind and name, then a hash of kind, group, name and uid: a leftover Workload of an earlier job
    of the same name never holds the new job's name. The expected name is what Kueue v0.14.0's
    jobframework.GetWorkloadNameForOwnerWithGVK returns for these (computed with `go run`, 2026-11-28)."""
    assert (
        kueue.workload_name(JobRef("mnist", "team-a", "0f1e2d3c-uid")) == "distributedtrainingjob-mnist-e2242"
    )
    assert (
        kueue.workload_name(JobRef("mnist", "team-a", "another-uid")) != "distributedtrainingjob-mnist-e2242"
    )
    assert len(kueue.workload_name(JobRef("x" * 253, "team-a", "u"))) == 253


def test_a_workload_of_an_earlier_release_keeps_its_name_when_the_job_is_suspended() -> None:
    job, children = running_gang()
    earlier = workload(("QuotaReserved", "True"), ("Admitted", "True"), admission=True)
    earlier["metadata"]["name"] = "dtjob-mnist"
    suspended = {**job, "spec": {**job["spec"], "runPolicy": {"suspend": True}}}
    plan = queued_pass(suspended, children, earlier)
    assert plan.workload_spec == {"metadata": {"name": "dtjob-mnist"}, "spec": {"active": False}}

"""A queued job's Workload follows the job as Kueue's job integrations keep theirs (pure): while it holds no
quota its podSets and queue are the job's now; a queue label changed under a running gang waits until the
gang stops; a job that leaves Kueue while its Workload holds no quota takes the Workload with it."""

from __future__ import annotations

import copy
from typing import Any

from dtjob.core import kueue
from dtjob.core.plan import Plan
from dtjob.core.workload_match import follows_job, holds_quota, queue_in_force
from tests.support.builders import NOW, pods_of, running, service_of
from tests.support.kueue import FLAVORS, JOB, QUEUED, workload
from tests.support.plan import after, condition, plan_for

PENDING = ("QuotaReserved", "False")
ADMITTED = (("QuotaReserved", "True"), ("Admitted", "True"))


def relabelled(job: dict[str, Any], queue: str | None) -> dict[str, Any]:
    labels = {k: v for k, v in (job["metadata"].get("labels") or {}).items() if k != kueue.QUEUE_LABEL}
    if queue is not None:
        labels[kueue.QUEUE_LABEL] = queue
    return {**job, "metadata": {**job["metadata"], "labels": labels}}


def with_cpu(job: dict[str, Any], cpu: str) -> dict[str, Any]:
    """The job with every role's trainer asking for `cpu` (a template changed while suspended)."""
    changed = copy.deepcopy(job)
    for replica in changed["spec"]["replicas"]:
        container = replica["template"]["spec"]["containers"][0]
        container.setdefault("resources", {}).setdefault("requests", {})["cpu"] = cpu
    return changed


def running_gang() -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    admitted = workload(*ADMITTED, admission=True)
    job = after(QUEUED, plan_for(QUEUED, [], NOW, workload=admitted, flavors=FLAVORS))
    children = [service_of(QUEUED), *(running(p) for p in pods_of(QUEUED).values())]
    job = after(job, plan_for(job, children, NOW, workload=admitted, flavors=FLAVORS))
    assert job["status"]["phase"] == "Running"
    return job, children, admitted


def test_a_template_changed_while_the_workload_holds_no_quota_is_brought_into_its_pod_sets() -> None:
    job = after(QUEUED, plan_for(QUEUED, [], NOW, workload=None))
    pending = workload(PENDING)
    assert plan_for(job, [], NOW, workload=pending).workload_spec is None  # it matches: nothing to write

    changed = with_cpu(job, "3")
    plan = plan_for(changed, [], NOW, workload=pending)
    assert plan.workload_spec is not None
    meta, spec = plan.workload_spec["metadata"], plan.workload_spec["spec"]
    assert meta["resourceVersion"] == "7"  # onto the version read: Kueue's reservation in between wins
    requests = [p["template"]["spec"]["containers"][0]["resources"]["requests"] for p in spec["podSets"]]
    assert {r["cpu"] for r in requests} == {"3"}
    assert spec["queueName"] == "team-a-gpus" and "active" not in spec
    assert (
        meta["annotations"][kueue.POD_SETS_ANNOTATION]
        != pending["metadata"]["annotations"][kueue.POD_SETS_ANNOTATION]
    )
    # Once written, it matches again.
    matched = {**pending, "metadata": {**pending["metadata"], **meta}, "spec": {**pending["spec"], **spec}}
    assert plan_for(changed, [], NOW, workload=matched).workload_spec is None


def test_a_workload_holding_quota_is_never_rewritten_whatever_the_job_says() -> None:
    job, children, admitted = running_gang()
    changed = with_cpu(job, "3")
    assert plan_for(changed, children, NOW, workload=admitted, flavors=FLAVORS).workload_spec is None
    checking = workload(("QuotaReserved", "True"))  # quota reserved, admission checks pending
    assert holds_quota(checking)
    assert plan_for(with_cpu(QUEUED, "3"), [], NOW, workload=checking).workload_spec is None


def test_a_restart_does_not_rewrite_the_workload_the_attempts_env_is_not_what_kueue_counts() -> None:
    job, _, _ = running_gang()
    pending = workload(PENDING)
    later = {**job, "status": {**job["status"], "attempt": 3}}
    assert plan_for(later, [service_of(QUEUED)], NOW, workload=pending).workload_spec is None


def test_a_workload_of_an_earlier_release_without_the_digest_is_brought_up_to_date_while_queued() -> None:
    job = after(QUEUED, plan_for(QUEUED, [], NOW, workload=None))
    earlier = workload(PENDING)
    earlier["metadata"] = {k: v for k, v in earlier["metadata"].items() if k != "annotations"}
    plan = plan_for(job, [], NOW, workload=earlier)
    assert (
        plan.workload_spec is not None
        and kueue.POD_SETS_ANNOTATION in (plan.workload_spec["metadata"]["annotations"])
    )


def test_a_queue_label_changed_while_queued_moves_the_workload_to_the_new_queue() -> None:
    job = after(QUEUED, plan_for(QUEUED, [], NOW, workload=None))
    moved = relabelled(job, "team-b-gpus")
    plan = plan_for(moved, [], NOW, workload=workload(PENDING))
    assert plan.workload_spec is not None and plan.workload_spec["spec"]["queueName"] == "team-b-gpus"
    assert plan.create == []
    assert "team-b-gpus" in condition(after(moved, plan), "Queued")["message"]


def test_a_queue_label_removed_from_a_running_job_leaves_it_in_its_workloads_queue_saying_so() -> None:
    job, children, admitted = running_gang()
    unlabelled = relabelled(job, None)
    plan = plan_for(unlabelled, children, NOW, workload=admitted, flavors=FLAVORS)
    assert plan.delete == [] and plan.create == [] and plan.workload_spec is None
    job = after(unlabelled, plan)
    assert job["status"]["phase"] == "Running"
    message = condition(job, "Admitted")["message"]
    assert "asks for no queue; the job stays in LocalQueue team-a-gpus" in message, message
    # It ends under Kueue: its Workload is Finished, so its quota is freed.
    assert queue_in_force(unlabelled, admitted, unqueued_gang_running=False) == "team-a-gpus"


def test_a_queue_label_removed_while_queued_deletes_the_workload_and_the_job_runs_unqueued() -> None:
    job = after(QUEUED, plan_for(QUEUED, [], NOW, workload=None))
    pending = workload(PENDING)
    unlabelled = relabelled(job, None)
    plan = plan_for(unlabelled, [], NOW, workload=pending)
    deleted = [(d.kind, d.name, d.uid) for d in plan.delete]
    assert deleted == [("Workload", pending["metadata"]["name"], "w-1")]
    assert len(plan.create) == 3  # no longer queued: the gang starts
    queued = condition(after(unlabelled, plan), "Queued")
    assert (queued["status"], queued["reason"]) == ("False", "NotQueued"), queued


def test_a_queue_label_added_to_a_running_unqueued_gang_waits_until_the_gang_stops() -> None:
    job = relabelled(QUEUED, None)
    job = after(job, plan_for(job, [], NOW))
    children = [service_of(job), *(running(p) for p in pods_of(job).values())]
    job = after(job, plan_for(job, children, NOW))
    labelled = relabelled(job, "team-a-gpus")
    plan = plan_for(labelled, children, NOW, workload=None)
    assert plan.workload is None and plan.delete == [] and plan.status is None
    assert (
        queue_in_force(labelled, None, unqueued_gang_running=False) == "team-a-gpus"
    )  # once the gang has stopped


def with_limit(job: dict[str, Any], resource: str, amount: str) -> dict[str, Any]:
    """The job with every role's trainer limited to `amount` of `resource`, requesting none of it."""
    changed = copy.deepcopy(job)
    for replica in changed["spec"]["replicas"]:
        container = replica["template"]["spec"]["containers"][0]
        container.setdefault("resources", {}).setdefault("limits", {})[resource] = amount
    return changed


def test_a_limit_changed_where_no_request_is_given_reaches_the_workload_as_kueue_counts_it() -> None:
    """Kueue counts a container's limit as its request where the request is missing (AdjustResources):
    a limits-only change is a change of what the Workload holds quota for."""
    job = after(QUEUED, plan_for(QUEUED, [], NOW, workload=None))
    one = with_limit(job, "example.com/fpga", "1")
    written = plan_for(one, [], NOW, workload=None).workload
    assert written is not None
    pending = workload(PENDING)
    pending["metadata"]["annotations"] = written["metadata"]["annotations"]
    assert plan_for(one, [], NOW, workload=pending).workload_spec is None  # it matches
    assert (
        plan_for(with_limit(job, "example.com/fpga", "2"), [], NOW, workload=pending).workload_spec
        is not None
    )
    # A limit whose resource is requested adds nothing to what Kueue counts: the digest is the same as
    # without the limit (Workloads written before limits were counted are not rewritten).
    requested = with_cpu(job, "1")
    bounded = with_limit(requested, "cpu", "2")
    digests = [
        (plan_for(j, [], NOW, workload=None).workload or {})["metadata"]["annotations"][
            kueue.POD_SETS_ANNOTATION
        ]
        for j in (requested, bounded)
    ]
    assert digests[0] == digests[1]


def test_a_gang_kueue_admitted_whose_workload_is_gone_is_queued_again_as_kueue_stops_it() -> None:
    job, children, _ = running_gang()
    plan = plan_for(job, children, NOW, workload=None, flavors=FLAVORS)
    assert plan.workload is not None and plan.create == []
    assert after(job, plan)["status"]["phase"] == "Queued"


def test_a_workload_follows_its_job_when_queue_and_pod_sets_digest_match() -> None:
    rendered = plan_for(QUEUED, [], NOW).workload
    assert rendered is not None and follows_job(rendered, rendered)
    assert not follows_job({**rendered, "spec": {**rendered["spec"], "queueName": "other"}}, rendered)


def test_a_new_job_without_a_queue_goes_to_the_namespaces_default_local_queue_as_kueue_defaults_it() -> None:
    """Kueue's LocalQueueDefaulting (on by default since v0.12): the label is recorded on the job before
    anything else, and the next pass queues it. A job that has a status (the operator acted on it), names a
    queue, or lives where no LocalQueue is named `default` is left as it is."""
    routes = {"default": "shared-gpus", "team-a-gpus": "gpus"}
    defaulted = plan_for(JOB, [], NOW, routes=routes)
    assert defaulted == Plan(job_labels={kueue.QUEUE_LABEL: "default"}, requeue_after=0.0)
    labelled = relabelled(JOB, "default")
    assert plan_for(labelled, [], NOW, routes=routes).workload is not None  # queued in it now
    assert plan_for(JOB, [], NOW, routes={"team-a-gpus": "gpus"}).job_labels is None
    assert plan_for(QUEUED, [], NOW, routes=routes).job_labels is None
    started = after(JOB, plan_for(JOB, [], NOW))  # created before the default queue: runs unqueued
    assert plan_for(started, [], NOW, routes=routes).job_labels is None
    assert plan_for(JOB, [], NOW, kueue_served=False).job_labels is None

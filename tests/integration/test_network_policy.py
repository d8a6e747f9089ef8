"""spec.networkPolicy against a real apiserver, with kwok playing the kubelet (tier B): the operator applies
the gang's NetworkPolicy before its pods, puts an edited one back, deletes it when the job turns it off,
and the garbage collector removes it with the job.

What the policy lets through is not tested here: the local cluster's CNI (the reference `bridge` plugin)
does not enforce NetworkPolicy, so it would block nothing (docs/security.md#network-isolation)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from kopf.testing import KopfRunner
from kubernetes import client

from tests.support.jobs import JOB_LABEL, Jobs, pytorch_job
from tests.support.waiting import wait_for


@pytest.fixture
def networking(api_client: client.ApiClient) -> client.NetworkingV1Api:
    return client.NetworkingV1Api(api_client)


def isolated(name: str, workers: int) -> dict[str, Any]:
    return pytorch_job(name, workers=workers, master=True, networkPolicy={"enabled": True})


def policies(networking: client.NetworkingV1Api, namespace: str, job: str) -> list[client.V1NetworkPolicy]:
    items: list[client.V1NetworkPolicy] = networking.list_namespaced_network_policy(
        namespace, label_selector=f"{JOB_LABEL}={job}"
    ).items
    return [p for p in items if not p.metadata.deletion_timestamp]


def created_at(obj: Any) -> datetime:
    stamp: datetime = obj.metadata.creation_timestamp
    return stamp


def test_an_isolated_job_gets_a_policy_admitting_only_its_own_pods_before_any_pod_exists(
    operator: KopfRunner, jobs: Jobs, networking: client.NetworkingV1Api, namespace: str
) -> None:
    job = jobs.create(isolated("iso", workers=2))
    pods = jobs.wait_pods("iso", 3)
    policy = networking.read_namespaced_network_policy("iso", namespace)
    gang = {JOB_LABEL: "iso"}
    assert policy.spec.pod_selector.match_labels == gang and not policy.spec.pod_selector.match_expressions
    assert policy.spec.policy_types == ["Ingress"] and not policy.spec.egress
    [rule] = policy.spec.ingress
    assert rule.ports is None  # every port: the rendezvous, NCCL's sockets, the preflight
    assert [(p.pod_selector.match_labels, p.namespace_selector, p.ip_block) for p in rule._from] == [
        (gang, None, None)  # pods of this namespace only, and of this job only
    ]
    assert policy.metadata.labels[JOB_LABEL] == "iso"
    [owner] = policy.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller, owner.block_owner_deletion) == (
        "DistributedTrainingJob",
        "iso",
        job["metadata"]["uid"],
        True,
        True,
    )
    # It selects every pod of the gang, and was applied before the first of them was created.
    assert all(pod.metadata.labels[JOB_LABEL] == "iso" for pod in pods)
    assert all(created_at(policy) <= created_at(pod) for pod in pods)
    assert len(policies(networking, namespace, "iso")) == 1


def test_an_edited_policy_is_put_back_turning_it_off_deletes_it_and_the_job_takes_it_along(
    operator: KopfRunner, jobs: Jobs, networking: client.NetworkingV1Api, namespace: str
) -> None:
    jobs.create(isolated("fence", workers=1))
    jobs.wait_pods("fence", 2)
    wait_for(lambda: policies(networking, namespace, "fence"), "the NetworkPolicy")

    # Opened to everyone by hand: the job's next pass applies it again. A change of the policy wakes no
    # pass (as with the Service); a change of the job does, so the test pokes the job until the policy
    # watch has delivered the edit to a pass.
    networking.patch_namespaced_network_policy("fence", namespace, {"spec": {"ingress": [{}]}})
    pokes = iter(range(1, 1000))

    def restored() -> bool:
        [rule] = networking.read_namespaced_network_policy("fence", namespace).spec.ingress
        if rule._from is not None and rule._from[0].pod_selector.match_labels == {JOB_LABEL: "fence"}:
            return True
        jobs.patch("fence", {"metadata": {"annotations": {"example.com/poke": str(next(pokes))}}})
        return False

    wait_for(restored, "the operator to apply the edited NetworkPolicy again", timeout=60, interval=1.0)

    # networkPolicy is no pod-shaping field: it changes on a running job.
    jobs.patch("fence", {"spec": {"networkPolicy": {"enabled": False}}})
    wait_for(
        lambda: not policies(networking, namespace, "fence"), "the NetworkPolicy to be deleted", timeout=60
    )
    assert len(jobs.pods("fence")) == 2  # the gang runs on, untouched
    jobs.patch("fence", {"spec": {"networkPolicy": {"enabled": True}}})
    wait_for(lambda: policies(networking, namespace, "fence"), "the NetworkPolicy again", timeout=60)

    jobs.delete("fence")
    wait_for(lambda: not networking.list_namespaced_network_policy(namespace, label_selector=f"{JOB_LABEL}=fence").items,
             "the garbage collector to delete the NetworkPolicy", timeout=60)  # fmt: skip

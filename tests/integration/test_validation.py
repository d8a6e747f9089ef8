"""Bad input against the real apiserver: the same tables the unit tests check against the model."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kopf.testing import KopfRunner
from kubernetes import client

from tests.support.bad_manifests import ALLOWED_UPDATES, BAD_MANIFESTS, BAD_UPDATES, job, replica
from tests.support.jobs import GROUP, PLURAL, VERSION, Jobs


def _message(err: client.ApiException) -> str:
    """The apiserver's own words (the Status message, JSON-decoded), as `kubectl apply` prints them."""
    return str(json.loads(err.body)["message"])


def _create(objects: client.CustomObjectsApi, namespace: str, manifest: dict[str, Any]) -> None:
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest)


@pytest.mark.parametrize("case", BAD_MANIFESTS, ids=lambda c: c.id)
def test_kubectl_apply_rejects_a_bad_manifest_naming_the_field(
    crd: dict[str, Any], objects: client.CustomObjectsApi, namespace: str, case: Any
) -> None:
    with pytest.raises(client.ApiException) as rejected:
        _create(objects, namespace, case.manifest)
    assert rejected.value.status == 422, rejected.value.body
    assert case.message in _message(rejected.value)


@pytest.mark.parametrize("case", BAD_UPDATES, ids=lambda c: c.id)
def test_an_update_that_breaks_a_transition_rule_is_rejected(
    crd: dict[str, Any], objects: client.CustomObjectsApi, namespace: str, case: Any
) -> None:
    _create(objects, namespace, case.manifest)
    name = case.manifest["metadata"]["name"]
    with pytest.raises(client.ApiException) as rejected:
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, {"spec": case.spec_patch}
        )
    assert rejected.value.status == 422, rejected.value.body
    assert case.message in _message(rejected.value)


def test_a_change_of_the_gangs_size_gets_one_message_whether_the_job_runs_or_is_suspended(
    crd: dict[str, Any], objects: client.CustomObjectsApi, namespace: str
) -> None:
    """Not also the suspend rule's: it sent users to suspend, where the change was refused again."""
    bigger = next(c for c in BAD_UPDATES if c.id == "changing a replica count is rejected")
    _create(objects, namespace, bigger.manifest)
    name = bigger.manifest["metadata"]["name"]
    messages = []
    for suspend in (False, True):
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, {"spec": {"runPolicy": {"suspend": suspend}}}
        )
        with pytest.raises(client.ApiException) as rejected:
            objects.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, {"spec": bigger.spec_patch}
            )
        messages.append(_message(rejected.value))
    assert messages[0] == messages[1], messages
    assert bigger.message in messages[0] and "suspend is true" not in messages[0], messages[0]


@pytest.mark.parametrize("case", ALLOWED_UPDATES, ids=lambda c: c.id)
def test_an_allowed_update_is_accepted(
    crd: dict[str, Any], objects: client.CustomObjectsApi, namespace: str, case: Any
) -> None:
    _create(objects, namespace, case.manifest)
    name = case.manifest["metadata"]["name"]
    objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": case.spec_patch})


def test_what_cel_cannot_check_becomes_an_invalid_condition_and_no_pods(
    operator: KopfRunner, jobs: Jobs
) -> None:
    # torchrun would start more processes than the pod has GPUs: only the operator sees that.
    manifest = job(
        "overcommitted",
        replicas=[replica("Worker", 2)],
        accelerator={"type": "nvidia-h100-80gb", "count": 2},
        torch={"nprocPerNode": 8},
        nccl={"profile": "TCP"},
    )
    jobs.create(manifest)
    invalid = jobs.wait_condition("overcommitted", "Invalid")
    assert "spec.torch.nprocPerNode" in invalid["message"]
    assert jobs.get("overcommitted")["status"]["phase"] == "Invalid"
    assert jobs.pods("overcommitted") == []

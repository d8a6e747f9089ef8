"""Tier A: a real apiserver serves CRDs with CEL rules, and the real controller-manager collects garbage."""

from __future__ import annotations

import pytest
from kubernetes import client

from localcluster import Cluster
from tests.support.waiting import wait_for

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.probe.dtjob.io"},
    "spec": {
        "group": "probe.dtjob.io",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}},
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self.min <= self.max",
                                        "message": "spec.min must not exceed spec.max",
                                    }
                                ],
                            }
                        },
                    }
                },
            }
        ],
    },
}


def test_a_crd_with_a_cel_rule_rejects_a_violating_object_with_the_rules_message(
    cluster_a: Cluster, api_client: client.ApiClient, namespace: str
) -> None:
    ext = client.ApiextensionsV1Api(api_client)
    try:
        ext.create_custom_resource_definition(WIDGET_CRD)
    except client.ApiException as err:
        if err.status != 409:
            raise
    wait_for(
        lambda: any(
            c.type == "Established" and c.status == "True"
            for c in ext.read_custom_resource_definition("widgets.probe.dtjob.io").status.conditions or []
        ),
        "the Widget CRD to be Established",
    )
    objects = client.CustomObjectsApi(api_client)

    def create(name: str, lo: int, hi: int) -> object:
        body = {"apiVersion": "probe.dtjob.io/v1", "kind": "Widget", "metadata": {"name": name},
                "spec": {"min": lo, "max": hi}}  # fmt: skip
        return objects.create_namespaced_custom_object("probe.dtjob.io", "v1", namespace, "widgets", body)

    # The CRD may be Established a moment before the discovery cache of the apiserver serves it.
    wait_for(lambda: create("fine", 1, 2), "a valid Widget to be accepted")
    with pytest.raises(client.ApiException) as rejected:
        create("backwards", 5, 1)
    assert rejected.value.status == 422
    assert "spec.min must not exceed spec.max" in rejected.value.body


def test_deleting_an_owner_garbage_collects_its_child(
    cluster_a: Cluster, core: client.CoreV1Api, namespace: str
) -> None:
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}, "data": {}})
    child_ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "child", "ownerReferences": [child_ref]}}
    )
    core.delete_namespaced_config_map("owner", namespace)

    def child_gone() -> bool:
        try:
            core.read_namespaced_config_map("child", namespace)
        except client.ApiException as err:
            return err.status == 404
        return False

    wait_for(child_gone, "the garbage collector to delete the child", timeout=60)

"""Test namespaces."""

from __future__ import annotations

from kubernetes import client

from tests.support.waiting import wait_for


def create_namespace(api: client.CoreV1Api, name: str, labels: dict[str, str] | None = None) -> None:
    """Create a namespace and wait for its default ServiceAccount: until the controller-manager has made
    it, every pod is refused ("serviceaccount default not found"), and after a control-plane restart or
    while it collects other namespaces that can take seconds."""
    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))
    wait_for(
        lambda: api.read_namespaced_service_account("default", name), f"sa/default in {name}", timeout=60
    )

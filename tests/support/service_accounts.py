"""ServiceAccount tokens from the apiserver's TokenRequest API: a kubeconfig for one that may not read
nodes, and a token bound to a pod (as the kubelet projects it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from dtjob.core.progress import AUDIENCE
from localcluster import Cluster
from tests.support.jobs import GROUP
from tests.support.waiting import wait_for

ISSUER = "https://kubernetes.default.svc.cluster.local"  # the local cluster's --service-account-issuer


def blind_kubeconfig(cluster: Cluster, core: client.CoreV1Api, namespace: str, path: Path) -> Path:
    """A kubeconfig for a ServiceAccount that may do everything the operator does in `namespace` but
    read nodes (a Role only: nodes are cluster-scoped)."""
    rbac = client.RbacAuthorizationV1Api(core.api_client)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "blind"}})
    rules: Any = [
        {"apiGroups": [""], "resources": ["pods", "services", "events"], "verbs": ["*"]},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["*"]},
        {"apiGroups": [GROUP], "resources": ["*"], "verbs": ["*"]},
    ]
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "blind"}, "rules": rules})
    binding: Any = {
        "metadata": {"name": "blind"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "blind"},
        "subjects": [{"kind": "ServiceAccount", "name": "blind", "namespace": namespace}],
    }
    rbac.create_namespaced_role_binding(namespace, binding)
    request: Any = {"spec": {"audiences": [ISSUER], "expirationSeconds": 3600}}
    token = core.create_namespaced_service_account_token("blind", namespace, request).status.token
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "blind", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "blind"
    path.write_text(yaml.safe_dump(config))
    return path


def token(core: client.CoreV1Api, namespace: str, pod: str, audience: str | None = AUDIENCE) -> str:
    """A projected-style token: the pod's service account's, bound to the pod (as the kubelet asks for)."""
    uid = core.read_namespaced_pod(pod, namespace).metadata.uid
    spec = client.V1TokenRequestSpec(
        audiences=[audience] if audience else [],
        expiration_seconds=600,
        bound_object_ref=client.V1BoundObjectReference(api_version="v1", kind="Pod", name=pod, uid=uid),
    )
    wait_for(lambda: core.read_namespaced_service_account("default", namespace), "the default ServiceAccount")
    request = core.create_namespaced_service_account_token(
        "default", namespace, client.AuthenticationV1TokenRequest(spec=spec)
    )
    return str(request.status.token)

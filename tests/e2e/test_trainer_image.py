"""What the torch trainer image carries beyond Python, checked in a real pod (tier C): the user-space RDMA
libraries GKE's gIB NCCL plugin opens (docs/gke.md), loadable by the trainer's own interpreter."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from hack import images
from localcluster import Cluster
from tests.support.waiting import wait_for

# libibverbs itself, and the Mellanox (mlx5) provider the GPU NICs of A3 Ultra, A4 and A4X need.
LOAD_RDMA_LIBRARIES = (
    "import ctypes, glob; ctypes.CDLL('libibverbs.so.1'); "
    "(provider,) = glob.glob('/usr/lib/*/libibverbs/libmlx5-rdmav*.so'); ctypes.CDLL(provider); print(provider)"
)


@pytest.mark.any_cluster
def test_the_torch_image_loads_the_rdma_user_space_libraries(
    cluster_c: Cluster, core: client.CoreV1Api, namespace: str
) -> None:
    ref = images.deliver(cluster_c, images.TORCH_TRAINER)
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "rdma-libraries"},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "probe",
                    "image": ref,
                    "imagePullPolicy": "IfNotPresent",
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    "command": ["python", "-c", LOAD_RDMA_LIBRARIES],
                }
            ],
        },
    }
    core.create_namespaced_pod(namespace, pod)

    def ended() -> str | None:
        phase = core.read_namespaced_pod("rdma-libraries", namespace).status.phase
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(ended, "the probe pod ends", timeout=180)
    log = core.read_namespaced_pod_log("rdma-libraries", namespace)
    assert phase == "Succeeded", log
    assert "libmlx5-rdmav" in log

"""The local Kueue's CRDs: the conversion Kueue's kustomization patches in, pointed at the host process."""

from __future__ import annotations

from localcluster.kueue import WEBHOOK_PORT, crds_with_conversion

# kubernetes-sigs/kueue v0.17.0 (4d5f7ffc7bdc5f88c723678cdacb89c05158dd36),
# config/components/crd/patches/webhook_in_workloads.yaml, read 2026-11-28; the file ends without a
# newline, so build.sh puts one before each separator.
WORKLOADS_PATCH = """\
# The following patch enables a conversion webhook for the CRD
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: workloads.kueue.x-k8s.io
spec:
  conversion:
    strategy: Webhook
    webhook:
      clientConfig:
        service:
          namespace: system
          name: webhook-service
          path: /convert
      conversionReviewVersions:
      - v1
---
"""


def crd(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"group": "kueue.x-k8s.io", "versions": []}}


def test_a_patched_crd_converts_through_kueue_on_this_host_and_the_others_are_left_alone() -> None:
    workloads, flavors = crd("workloads.kueue.x-k8s.io"), crd("resourceflavors.kueue.x-k8s.io")
    patched = crds_with_conversion([workloads, flavors], WORKLOADS_PATCH, "Q0E=")
    assert patched[0]["spec"] == {
        **workloads["spec"],
        "conversion": {
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": {"url": f"https://127.0.0.1:{WEBHOOK_PORT}/convert", "caBundle": "Q0E="},
                "conversionReviewVersions": ["v1"],
            },
        },
    }
    assert patched[1] == flavors
    assert crds_with_conversion([flavors], "", "Q0E=") == [flavors]

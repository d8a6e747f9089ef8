"""Cloud Storage FUSE: the annotations that get a pod GKE's sidecar, and the sidecar's limits."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

# Cloud Storage FUSE: GKE injects its sidecar into a pod only with this annotation (docs/gke.md).
GCSFUSE_DRIVER: Final = "gcsfuse.csi.storage.gke.io"
GCSFUSE_ANNOTATION: Final = "gke-gcsfuse/volumes"
# The sidecar's default limits (250m CPU, 256Mi memory, 5Gi ephemeral storage in the driver's webhook) throttle
# a gang's checkpoint writes and reads; "0" leaves each unlimited, as Google's GPU training recipes set
# them ("if limited the gcsfuse read performance decreases drastically"; tests/data/gke_recipes/gcsfuse.yaml).
# Autopilot does not accept "0" there (the driver's troubleshooting guide): its pods keep the defaults.
GCSFUSE_SIDECAR_UNLIMITED: Final = {
    f"gke-gcsfuse/{resource}-limit": "0" for resource in ("cpu", "memory", "ephemeral-storage")
}
GCSFUSE_SIDECAR_RESOURCES: Final = re.compile(r"^gke-gcsfuse/(.+)-(limit|request)$")


def annotate_gcsfuse(
    annotations: dict[str, str],
    pod_spec: Mapping[str, Any],
    template_annotations: Mapping[str, str],
    autopilot: bool,
) -> None:
    """The sidecar's annotation where a volume is a Cloud Storage FUSE CSI volume, then the template's
    annotations (which win), then no limits on the sidecar unless the template sizes it or the pods take
    Autopilot's shape."""
    if any((v.get("csi") or {}).get("driver") == GCSFUSE_DRIVER for v in pod_spec.get("volumes") or []):
        annotations[GCSFUSE_ANNOTATION] = "true"
    annotations.update(template_annotations)
    sized = any(map(GCSFUSE_SIDECAR_RESOURCES.match, template_annotations))
    if annotations.get(GCSFUSE_ANNOTATION) == "true" and not sized and not autopilot:
        annotations.update(GCSFUSE_SIDECAR_UNLIMITED)

"""A job's children: the headless Service, the NetworkPolicy if enabled, the ResourceClaimTemplate of the
GPU NICs under a profile that claims them (ManagedRDMA), one Pod per replica in rank order.

Pure and deterministic: the same job and attempt give byte-identical objects, ready for server-side
apply (apiVersion and kind set, no status). How the template is merged with what the operator injects:

- Labels: the template's, then the operator's (training.dtjob.io/job-name, job-uid, role, replica-index,
  rank: the position in the gang, attempt; a hot spare's: job-name, job-uid, role, spare) which win.
  Annotations: under restartStrategy InPlace training.dtjob.io/rendezvous-host (the DNS name of the pod
  that holds rank 0) and, on members, training.dtjob.io/attempt-resync (the attempt, names.py), the NCCL
  profile's, `gke-gcsfuse/volumes: "true"` when a volume is a Cloud Storage FUSE CSI volume (the
  checkpoint's or the template's) and with it no limit on the FUSE sidecar's CPU, memory and ephemeral
  storage (`gke-gcsfuse/*-limit: "0"`) unless the template sizes the sidecar itself or the pods take
  Autopilot's shape, then the template's, which win.
- The container named "trainer", else the first one, receives env, ports, mounts and GPU resources,
  and terminationMessagePolicy FallbackToLogsOnError unless the template sets one: a trainer that
  crashes without writing a termination message gets its last log lines there instead, and restart
  Events and the status quote them.
- With checkpoint.volume, the pod's securityContext.fsGroup is 1000 (the user the trainer images run
  as) unless the template sets one: the kubelet then makes a fresh, root-owned volume writable by the
  trainer. NFS and Filestore volumes are not changed: see "Checkpoint volumes" in fault-tolerance.md.
- Env is merged by name. Injected variables come first, in this order: DTJ_JOB_NAME, DTJ_ROLE,
  DTJ_REPLICA_INDEX, DTJ_ATTEMPT, DTJ_CHECKPOINT_DIR; the framework's rendezvous variables (PyTorch:
  MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, NODE_RANK, LOCAL_RANK, PET_NNODES, PET_NPROC_PER_NODE,
  PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT; elastic PyTorch (spec.torch.elastic) instead: PET_NNODES,
  PET_NPROC_PER_NODE, PET_RDZV_BACKEND, PET_RDZV_ENDPOINT, PET_RDZV_ID, PET_RDZV_CONF, PET_MAX_RESTARTS,
  TORCH_DISABLE_SHARE_RDZV_TCP_STORE; TensorFlow: TF_CONFIG); CLUSTER_SPEC; AIP_CHECKPOINT_DIR,
  AIP_MODEL_DIR, AIP_TENSORBOARD_LOG_DIR; DTJ_PROGRESS_URL and DTJ_PROGRESS_TOKEN_FILE when the operator
  takes progress reports (a projected token volume goes with them, docs/progress.md); then, on GPU roles, the NCCL profile's variables, NCCL_DEBUG,
  TORCH_NCCL_ASYNC_ERROR_HANDLING (PyTorch) and spec.nccl.env. The template's own entries follow in their
  order. A template entry with the same name as an injected one WINS for the tunables (AIP_* and all
  NCCL-profile variables) and is DROPPED for the rendezvous contract (DTJ_*, the framework's variables,
  CLUSTER_SPEC): a pod with its own RANK would break the gang.
- Volumes are merged by name, mounts by path, ports by number, init containers by name, tolerations by
  equality: what the template already has wins, so a template can replace /dev/shm or a profile's
  volume. The nodeSelector keys for the accelerator, Spot and the compact placement group are the
  operator's.
- Under a profile that claims the GPU NICs through DRA (ManagedRDMA), GPU pods get the claim
  `dtj-gpu-nics` from the job's ResourceClaimTemplate, and the trainer (so the preflight too) uses it; the
  template's own resourceClaims (an A4X ComputeDomain channel) are kept.
- On GPU roles, LD_LIBRARY_PATH is the network profile's library directories, then the template's own
  value (else what CUDA images set: /usr/local/nvidia/lib:/usr/local/nvidia/lib64). Kubernetes cannot
  see an image's environment: an image that needs more on it sets it in the template's env.
"""

from dtjob.core.render.accelerator import PLACEMENT_GROUP_NODE_LABEL
from dtjob.core.render.network import (
    GPU_NIC_CLAIM,
    render_gpu_nic_claims,
    render_network_policy,
    render_service,
)
from dtjob.core.render.pods import render_children, render_pod, render_spare
from dtjob.core.render.podspec import trainer_container
from dtjob.core.render.volumes import ATTEMPT_FILE, ATTEMPT_VOLUME, SHM_VOLUME

__all__ = [
    "ATTEMPT_FILE",
    "ATTEMPT_VOLUME",
    "GPU_NIC_CLAIM",
    "PLACEMENT_GROUP_NODE_LABEL",
    "SHM_VOLUME",
    "render_children",
    "render_gpu_nic_claims",
    "render_network_policy",
    "render_pod",
    "render_service",
    "render_spare",
    "trainer_container",
]

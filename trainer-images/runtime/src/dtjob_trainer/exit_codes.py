"""Exit codes a training process uses to tell the operator how it ended.

PREEMPTED_CHECKPOINT_SAVED = 200 means: "I was asked to stop (SIGTERM), I finished the step I was in,
a checkpoint of that step is durable in the checkpoint directory, restart me from it". Why 200:

- >= 128, so policies that restart on "signal-like" codes (Kubeflow's ExitCode policy, ours) retry it
  even if they do not know this code;
- > 192, so no death by signal can produce it (a shell or kubelet reports 128 + signal number, and
  Linux signal numbers stop at 64);
- not 143 (128 + SIGTERM), which is what any process killed by SIGTERM, or one that gave up, reports:
  the operator can tell "stopped cleanly with a fresh checkpoint" from "terminated";
- not 255, which `exit(-1)` and many tools produce for unrelated errors.
"""

from __future__ import annotations

from typing import Final

PREEMPTED_CHECKPOINT_SAVED: Final = 200

# What a SIGTERM kill reports anyway; the runtime uses it when the budget ran out before a checkpoint
# was durable, so the exit looks like the plain termination it is.
TERMINATED_WITHOUT_CHECKPOINT: Final = 143

# The NCCL preflight found the gang's collective path below its floor, or fallen back to TCP sockets
# (dtjob_trainer.preflight); its termination message says which, with the figures.
PREFLIGHT_FAILED: Final = 3

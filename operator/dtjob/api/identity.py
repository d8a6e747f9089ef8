"""Who the custom resource is: group, version, kind and the names kubectl knows it by."""

from __future__ import annotations

from typing import Final

GROUP: Final = "training.dtjob.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "DistributedTrainingJob"
LIST_KIND: Final = f"{KIND}List"
PLURAL: Final = "distributedtrainingjobs"
SINGULAR: Final = "distributedtrainingjob"
SHORT_NAMES: Final = ("dtj",)
CATEGORIES: Final = ("all",)
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

# Every child is named `<job>-<role>-<index>` and that name is also the pod's hostname, a DNS label of at
# most 63 characters. The longest role is "evaluator" and an index has at most 4 digits (count <= 10000),
# so the suffix is at most 1 + 9 + 1 + 4 = 15 characters: 63 - 15 = 48. We keep 3 more in reserve for a
# future suffix (e.g. a 2-digit slice index) without breaking existing jobs: 45.
MAX_JOB_NAME_LENGTH: Final = 45
MAX_REPLICA_COUNT: Final = 10000
# Hot spares are named `<job>-<role>-spare<k>` (PyTorch roles: master, worker), k the lowest number free:
# 45 + 13 + 5 digits = 63, even were every member of the largest gang replaced by a spare.
MAX_SPARES: Final = 16

"""The whole custom resource as the apiserver stores it, and the rules on its name."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from dtjob.api.identity import MAX_JOB_NAME_LENGTH
from dtjob.api.rules import Rule
from dtjob.api.spec import DistributedTrainingJobSpec

DNS_LABEL: Final = "^[a-z]([-a-z0-9]*[a-z0-9])?$"

# Rules at the root of the schema: CEL there may read metadata.name (and nothing else of metadata).
NAME_RULES: Final = (
    Rule(
        cel=f"self.metadata.name.size() <= {MAX_JOB_NAME_LENGTH}",
        message=f"metadata.name must be at most {MAX_JOB_NAME_LENGTH} characters, so that pod names "
        "<name>-<role>-<index> stay valid 63-character DNS labels",
        holds=lambda job: len(job.name) <= MAX_JOB_NAME_LENGTH,
    ),
    Rule(
        cel=f"self.metadata.name.matches('{DNS_LABEL}')",
        message="metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a "
        "letter): it names the job's headless Service",
        holds=lambda job: re.fullmatch(DNS_LABEL, job.name) is not None,
    ),
)


class DistributedTrainingJob(BaseModel):
    """A manifest as `kubectl apply` sends it; used to check manifests offline (examples, bad manifests)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    apiVersion: Literal["training.dtjob.io/v1alpha1"] = "training.dtjob.io/v1alpha1"
    kind: Literal["DistributedTrainingJob"] = "DistributedTrainingJob"
    metadata: dict[str, Any]
    spec: DistributedTrainingJobSpec
    status: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or self.metadata.get("generateName") or "")

    @model_validator(mode="after")
    def _check_name(self) -> DistributedTrainingJob:
        for rule in NAME_RULES:
            if rule.holds is not None and not rule.holds(self):
                raise ValueError(rule.message)
        return self


def parse_job(manifest: Mapping[str, Any]) -> DistributedTrainingJob:
    """Validate a whole manifest; raises pydantic.ValidationError with messages that name the field."""
    return DistributedTrainingJob.model_validate(manifest)

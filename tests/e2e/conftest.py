"""E2E tests reuse the integration fixtures: the installed CRD and the job helpers."""

from tests.integration.conftest import crd, jobs, objects, operator

__all__ = ["crd", "jobs", "objects", "operator"]

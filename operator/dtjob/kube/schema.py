"""The installed CRD against this operator's: upgraded at start-up when it is older and the operator may,
else the reason the operator must not act on jobs (the apiserver would prune the status it writes)."""

from __future__ import annotations

import logging

from kubernetes import client

from dtjob import crd
from dtjob.api import CRD_NAME
from dtjob.kube.access import Kube

log = logging.getLogger(__name__)


def refusal(kube: Kube, may_upgrade: bool) -> str | None:
    """Why the operator must not act on jobs with the CRD as installed (None: it may); an older CRD is
    upgraded first when `may_upgrade`."""
    try:
        found = crd.standing(kube.read.read_crd())
    except client.ApiException as err:
        if err.status != 403:
            raise
        log.warning("may not read the CRD %s: its schema revision is not checked", CRD_NAME)
        return None
    if found.standing == crd.Standing.STALE and may_upgrade:
        try:
            kube.write.apply_crd(crd.custom_resource_definition())
        except client.ApiException as err:
            if err.status != 403:
                raise
            refused = found.refusal(may_upgrade=False)
            return f"{refused} (this operator may not patch the CRD: {err.reason}; the chart grants it)"
        log.info("upgraded the CRD %s from %s to revision %d", CRD_NAME,
                 f"revision {found.revision}" if found.revision is not None else "no revision", crd.SCHEMA_REVISION)  # fmt: skip
        return None
    if found.standing == crd.Standing.NEWER:
        log.info("the CRD %s is of a later release (revision %s), a superset of this operator's (%d)",
                 CRD_NAME, found.revision, crd.SCHEMA_REVISION)  # fmt: skip
    return found.refusal(may_upgrade)

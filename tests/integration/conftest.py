"""Integration fixtures: the operator run in-process, fake GPU nodes of a test's own, and the adapter's log
(the installed CRD and the job helpers are the root conftest's, shared with e2e).

Each test gets its own operator watching only its own namespace (`kopf run --namespace`), so tests are
isolated and a test can stop and restart the operator mid-way.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from typing import Any

import pytest
from kopf.testing import KopfRunner
from kubernetes import client

from localcluster import Cluster, sim
from tests.support.jobs import OWN_NODE_TAINT
from tests.support.operator import Records, running_operator


@pytest.fixture
def operator(cluster_b: Cluster, crd: dict[str, Any], namespace: str) -> Iterator[KopfRunner]:
    with running_operator(cluster_b, namespace) as runner:
        yield runner


@pytest.fixture
def own_nodes(cluster_b: Cluster, core: client.CoreV1Api) -> Iterator[list[str]]:
    """Three fresh fake GPU nodes for this test alone (tainted: only pods pinned there with `pin_to_nodes`
    go there), which it may delete; removed afterwards."""
    indices = random.sample(range(5000, 10000), 3)
    names = [sim.add_gpu_node(cluster_b, index, extra_taints=(OWN_NODE_TAINT,)) for index in indices]
    yield names
    for name in names:
        try:
            core.delete_node(name)
        except client.ApiException as err:
            if err.status != 404:
                raise


@pytest.fixture
def adapter_log() -> Iterator[Records]:
    """What the in-process operator's adapter logs (a failed pass says "reconcile of ...")."""
    records, logger = Records(), logging.getLogger("dtjob.runtime")
    logger.addHandler(records)
    yield records
    logger.removeHandler(records)

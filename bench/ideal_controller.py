"""A controller with no overhead at all: the lower bound of the start-up benchmark for any controller.

`../shared/peers/bench_peers.py startup` times each job from its create call until its 8 pods are Running.
The dtjob contender's jobs are created at once, so its clock starts before the controller creates any pod;
the floor's clock starts at each job's first pod create, so the floor's own queueing (16 threads creating
800 pods take ~5.6 s) is left out of its figures. This module runs in dtjob's place (the harness's
DTJOB_MODULE) and does the least a controller can: for each job its watch delivers, the floor's own pods
(the harness's `Floor.pod`, no owner, no Service, no status), created from 16 threads without a rate limit.
Its p50 over the floor's is what no controller can beat on that cluster (docs/measurements.md):

    cd <repo> && PEERS_DIR=/tmp/peers DTJOB_REPO=$PWD DTJOB_MODULE=bench.ideal_controller \
        .venv/bin/python ../shared/peers/bench_peers.py startup --order floor,dtjob --tag ideal
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import kopf
from kubernetes import client, config, watch

from dtjob.api import GROUP, PLURAL, VERSION

THREADS = 16  # as the harness's floor

log = logging.getLogger(__name__)


def _pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The floor's own pods for the job (the harness's `Floor.pod`, so that only the clock differs): the
    harness puts its directory on the path of the controller it runs."""
    from bench_peers import Floor  # type: ignore[import-not-found]

    size = sum(int(replica.get("count", 1)) for replica in job["spec"]["replicas"])
    floor = Floor()
    return [floor.pod(job["metadata"]["name"], k) for k in range(size)]


def _failed(created: Future[Any]) -> None:
    if (error := created.exception()) is not None:
        log.error("a pod create failed: %s", error)


def _create_for_each_job(namespace: str) -> None:
    config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = THREADS
    api = client.ApiClient(configuration)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    creators = ThreadPoolExecutor(THREADS)
    try:
        for event in watch.Watch().stream(
            custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL
        ):
            if event["type"] == "ADDED":
                for pod in _pods(event["object"]):
                    creators.submit(core.create_namespaced_pod, namespace, pod).add_done_callback(_failed)
    finally:  # the harness then waits for pods that never come: say why
        log.error("ideal controller: the job watch ended; no more pods are created")


def start(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.scanning.disabled = True
    settings.posting.enabled = False
    namespace = sys.argv[sys.argv.index("--namespace") + 1]  # as the harness runs it: kopf run --namespace NS
    threading.Thread(target=_create_for_each_job, args=(namespace,), daemon=True, name="ideal").start()
    log.info("ideal controller: creating the floor's pods for each job in %s", namespace)


# Registered only when the harness runs this module (it passes DTJOB_MODULE on to the operator's process):
# imported anywhere else (the benches' import test, in the process where the tests run dtjob's operator
# through Kopf's default registry) it must add no handler.
if os.environ.get("DTJOB_MODULE") == __name__:
    kopf.on.startup()(start)

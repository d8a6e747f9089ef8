"""Session fixtures: the real local cluster at the tier a test needs, and a namespace per test; the
generated CRD installed and the job helpers (integration and e2e tests).

A test asks for `cluster_a`, `cluster_b` or `cluster_c`. The fixture brings the cluster up to that tier
(incrementally, reusing the build cache) and, if this session started it, takes it down at the end unless
DTJOB_KEEP_CLUSTER=1. A component that died fails the test loudly with its log tail. Under pytest-xdist
(`make test`) the workers share the cluster; a test marked `cluster_wide` has it to itself
(docs/testing.md).

With DTJOB_CLUSTER=current (`make test-e2e CLUSTER=current`) the tests marked `any_cluster` run on the
kubeconfig's context (DTJOB_CONTEXT, else its current one) instead, with the images pushed to
DTJOB_REGISTRY; the others, which need this machine's node or kwok's, are deselected.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from hack.current import CurrentCluster, pinned_kubeconfig
from localcluster import Cluster, Tier
from localcluster.crds import wait_established
from localcluster.layout import Layout
from tests.support.durations import LOCK_WAIT, DurationReport
from tests.support.paths import CRD_FILE
from tests.support.tiers import CURRENT_CLUSTER, at_tier
from tests.support.waiting import wait_for, waits_ending_within

# The kubernetes client reads KUBECONFIG once, at import; the operator run in-process (Kopf's login) too.
os.environ["KUBECONFIG"] = str(
    pinned_kubeconfig(os.environ.get("DTJOB_CONTEXT") or None)
    if CURRENT_CLUSTER
    else Layout.from_env().kubeconfig()
)

import pytest
from kubernetes import client, config

from tests.support import hygiene
from tests.support.jobs import Jobs
from tests.support.namespaces import create_namespace
from tests.support.sharing import (
    CLUSTER,
    LOCKS,
    MACHINE,
    TRAINING_SLOTS_ENV,
    TRAININGS,
    a_slot,
    interleaved,
    owning,
    sharing,
)

# The fixtures that bring the cluster to a tier (directly or through another fixture): a test is marked
# with the highest tier among the fixtures it uses, so `pytest -m "not tier_c"` selects (docs/testing.md).
TIER_FIXTURES = {
    "tier_c": ("cluster_c",),
    "tier_b": ("cluster_b", "kueue_cluster"),
    "tier_a": ("cluster_a", "api_client", "local_cluster"),
}


# Tests that change what every other test sees (docs/testing.md#sharing-the-cluster): they run one at a
# time (`make test` runs them in a pytest process of their own), while no other test holds the cluster.
CLUSTER_WIDE = "cluster_wide"
# Tests that measure time against the machine's pace: no trainer gang runs beside them.
QUIET = "quiet"


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    # The xdist controller (or a plain run): it writes the report, and takes down at the end a cluster
    # that was not running at the start (the workers never do: the others may still be using it).
    config.pluginmanager.register(DurationReport(), "dtjob-durations")
    config.stash[CLUSTER_WAS_RUNNING] = CURRENT_CLUSTER or Cluster().running_tier() is not None
    # The run's name, which its xdist workers inherit: a worker that uses the cluster says so under it.
    os.environ[RUN_ENV] = uuid.uuid4().hex


CLUSTER_WAS_RUNNING = pytest.StashKey[bool]()
RUN_ENV = "DTJOB_TEST_RUN"


def _used_the_cluster() -> Path:
    """The mark a run leaves once one of its tests asked for the local cluster."""
    return LOCKS / f"cluster-used-by-{os.environ.get(RUN_ENV, 'run')}"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Take down a cluster this run brought up; never one a run that used none finds down at its start
    (unit tests run beside `make test` while its cluster_wide tests take it down and up again)."""
    config = session.config
    if hasattr(config, "workerinput"):
        return
    used, mark = _used_the_cluster().exists(), _used_the_cluster()
    mark.unlink(missing_ok=True)
    if config.stash.get(CLUSTER_WAS_RUNNING, True) or not used:
        return
    if os.environ.get("DTJOB_KEEP_CLUSTER") != "1":
        Cluster().down()


def mark_tiers(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(tier) for tier in TIER_FIXTURES):
            continue  # a test that brings the cluster up itself says its tier
        used = set(getattr(item, "fixturenames", ()))
        tier = next((tier for tier, names in TIER_FIXTURES.items() if used.intersection(names)), None)
        if tier:
            item.add_marker(tier)


# The slowest tests first, so that none starts last: by a test's mean time (53, 9 and 6 s in the run of
# 64f6283). With `cluster` last, its 71 s pod GC test started at 1,833 s and ran alone to the end.
CLUSTER_FOLDERS = ("e2e", "cluster", "integration")


def scheduling_order(item: pytest.Item) -> int:
    """The order tests run in (xdist hands them out so, `--no-loadscope-reorder`): the quiet ones first
    (before the trainer's gangs start), the other cluster-wide ones next; then the tests that need no
    cluster, the trainer's long ones first (`make test` runs them beside the cluster-wide ones, which run
    in a process of their own); then the cluster tests, the slowest folders first, so that no long test
    starts last."""
    if item.get_closest_marker(QUIET):
        return -1  # before the trainer's gangs have started beside them
    if item.get_closest_marker(CLUSTER_WIDE):
        return 0
    if not any(item.get_closest_marker(tier) for tier in TIER_FIXTURES):
        return 1 if item.nodeid.startswith("tests/trainer/") else 2
    folder = item.nodeid.split("/")[1]
    return 3 + (CLUSTER_FOLDERS.index(folder) if folder in CLUSTER_FOLDERS else len(CLUSTER_FOLDERS))


def trains(item: pytest.Item) -> bool:
    """A test that runs trainer processes (a local gang, or pods on the real node): it takes a training
    slot under `make test`, which runs more workers than slots."""
    return item.nodeid.startswith(("tests/trainer/", "tests/e2e/"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_tiers(items)
    items.sort(key=scheduling_order)  # stable: each folder keeps its order
    first_cluster_test = next((i for i, item in enumerate(items) if scheduling_order(item) >= 3), len(items))
    # The cluster tests that train spread among the others (tests/support/sharing.py: interleaved).
    items[first_cluster_test:] = interleaved(items[first_cluster_test:], trains)
    if not CURRENT_CLUSTER:
        return
    local_only = [item for item in items if item.get_closest_marker("any_cluster") is None]
    if local_only:
        config.hook.pytest_deselected(items=local_only)
        items[:] = [item for item in items if item.get_closest_marker("any_cluster")]
        print(
            f"\n[current] {len(local_only)} tests need this machine's node or kwok's: not run on the current cluster"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """The test's waits end within pytest-timeout's limit for the whole test (pyproject.toml), a tenth
    of it left for its teardown: one that times out says what it waited for and what there was."""
    limit = float(item.config.getoption("timeout", None) or item.config.getini("timeout") or 0)
    with waits_ending_within(limit * 0.9) if limit else contextlib.nullcontext():
        yield


@pytest.fixture(autouse=True)
def cluster_lock(request: pytest.FixtureRequest) -> Iterator[None]:
    """A share of the cluster for every test that uses it, the whole cluster for a `cluster_wide` one, and
    the whole machine for a `quiet` one, which every other test shares (tests/support/sharing.py);
    set up before the test's other fixtures, so a tier fixture brings the cluster up only under it. Chart
    tests run the cluster's helm binary, which the lifecycle test would count as left behind."""
    item = request.node
    with contextlib.ExitStack() as held:
        waiting = time.monotonic()
        # Every test shares the machine, so that a quiet one (a timing claim) runs with no other test
        # beside it: an ETA judged beside the unit tests' hypothesis runs was 37 % off (2026-12-02).
        quiet = item.get_closest_marker(QUIET) is not None
        held.enter_context(owning(MACHINE) if quiet else sharing(MACHINE))
        if item.get_closest_marker(CLUSTER_WIDE):
            held.enter_context(owning(CLUSTER))
        elif any(item.get_closest_marker(tier) for tier in TIER_FIXTURES) or item.nodeid.startswith(
            "tests/chart/"
        ):
            held.enter_context(sharing(CLUSTER))
        if (slots := int(os.environ.get(TRAINING_SLOTS_ENV, "0"))) and trains(item) and not quiet:
            held.enter_context(a_slot(TRAININGS, slots))
        # The duration report tells the time a test waited for others from its own (tests/support/durations.py).
        item.user_properties.append((LOCK_WAIT, round(time.monotonic() - waiting, 2)))
        yield
        if not CURRENT_CLUSTER and (
            item.get_closest_marker(CLUSTER_WIDE) or item.get_closest_marker("kueue")
        ):
            check_hygiene(item, alone=item.get_closest_marker(CLUSTER_WIDE) is not None)


def check_hygiene(item: pytest.Item, alone: bool) -> None:
    """After a cluster-wide or Kueue test, while it still holds the cluster and its other fixtures are
    gone: the cluster as at rest (tests/support/hygiene.py), or the test fails, naming what it left, and
    the cluster is restored for the tests after it. The net never reruns such a test (hack/flake_net.py)."""
    cluster = Cluster()
    if cluster.running_tier() is None:  # taken down (the lifecycle test): nothing can have leaked
        return
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    namespace = getattr(item, "funcargs", {}).get("namespace")
    taken = hygiene.snapshot(api)
    if found := hygiene.findings(taken, namespace, alone=alone):
        done = hygiene.restore(api, cluster.kubectl, taken, namespace, alone=alone)
        pytest.fail(
            hygiene.message(found) + "\nrestored:\n" + "\n".join(f"  {d}" for d in done), pytrace=False
        )


@pytest.fixture(scope="session")
def local_cluster() -> Cluster:
    if CURRENT_CLUSTER:
        # Duck-typed as the local cluster where `any_cluster` tests use it (kubeconfig, kubectl, images).
        return CurrentCluster.from_kubeconfig(registry=os.environ.get("DTJOB_REGISTRY") or None)
    LOCKS.mkdir(parents=True, exist_ok=True)
    _used_the_cluster().touch()
    return Cluster()


@pytest.fixture
def cluster_a(local_cluster: Cluster) -> Cluster:
    return at_tier(local_cluster, Tier.A)


@pytest.fixture
def cluster_b(local_cluster: Cluster) -> Cluster:
    return at_tier(local_cluster, Tier.B)


@pytest.fixture
def cluster_c(local_cluster: Cluster) -> Cluster:
    return at_tier(local_cluster, Tier.C)


@pytest.fixture
def api_client(local_cluster: Cluster) -> client.ApiClient:
    # The kubeconfig exists once the control plane does: whatever tier the test asks for next, at least A.
    # A client per test: a cluster brought down and up again (the lifecycle test) has new credentials.
    return config.new_client_from_config(config_file=str(at_tier(local_cluster, Tier.A).kubeconfig))


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def namespace(local_cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting: the cluster collects it)."""
    # Tier fixtures run first so the apiserver exists before we create the namespace.
    for name in ("cluster_c", "cluster_b", "cluster_a"):
        if name in request.fixturenames:
            request.getfixturevalue(name)
            break
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(local_cluster.kubeconfig)))
    name = f"t-{request.node.name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:6]}"
    name = "".join(ch for ch in name if ch.isalnum() or ch == "-")
    create_namespace(api, name)
    yield name
    api.delete_namespace(name)


@pytest.fixture
def crd(cluster_a: Cluster) -> dict[str, Any]:
    """Install (or update) the committed, generated CRD and wait until it is served."""
    local_cluster = cluster_a
    local_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    name = yaml.safe_load(CRD_FILE.read_text())["metadata"]["name"]
    wait_established(local_cluster.kubectl, [name])
    # Established can precede discovery by a moment: wait until kubectl can list the resource.
    wait_for(lambda: local_cluster.kubectl("get", "dtj", "-A") is not None, "the dtj short name in discovery")
    return yaml.safe_load(CRD_FILE.read_text())


@pytest.fixture
def objects(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture
def jobs(objects: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str) -> Jobs:
    return Jobs(objects, core, namespace)

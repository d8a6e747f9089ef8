"""Session fixtures: the real local cluster at the tier a test needs, and a namespace per test.

A test asks for `cluster_a`, `cluster_b` or `cluster_c`. The fixture brings the cluster up to that tier
(incrementally, reusing the build cache) and, if this session started it, takes it down at the end unless
DTJOB_KEEP_CLUSTER=1. A component that died fails the test loudly with its log tail.

With DTJOB_CLUSTER=current (`make test-e2e CLUSTER=current`) the tests marked `any_cluster` run on the
kubeconfig's context (DTJOB_CONTEXT, else its current one) instead, with the images pushed to
DTJOB_REGISTRY; the others, which need this machine's node or kwok's, are deselected.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

from hack.current import CurrentCluster, pinned_kubeconfig
from localcluster import Cluster, Tier
from localcluster.layout import Layout
from tests.support.durations import DurationReport
from tests.waiting import wait_for

CURRENT_CLUSTER = os.environ.get("DTJOB_CLUSTER") == "current"

# The kubernetes client reads KUBECONFIG once, at import; the operator run in-process (Kopf's login) too.
os.environ["KUBECONFIG"] = str(
    pinned_kubeconfig(os.environ.get("DTJOB_CONTEXT") or None)
    if CURRENT_CLUSTER
    else Layout.from_env().kubeconfig()
)

import pytest  # noqa: E402
from kubernetes import client, config  # noqa: E402

# The fixtures that bring the cluster to a tier (directly or through another fixture): a test is marked
# with the highest tier among the fixtures it uses, so `pytest -m "not tier_c"` selects (docs/testing.md).
TIER_FIXTURES = {
    "tier_c": ("cluster_c",),
    "tier_b": ("cluster_b", "kueue_cluster"),
    "tier_a": ("cluster_a", "api_client", "local_cluster"),
}


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the xdist controller (or a plain run) writes the report
        config.pluginmanager.register(DurationReport(), "dtjob-durations")


def mark_tiers(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(tier) for tier in TIER_FIXTURES):
            continue  # a test that brings the cluster up itself says its tier
        used = set(getattr(item, "fixturenames", ()))
        tier = next((tier for tier, names in TIER_FIXTURES.items() if used.intersection(names)), None)
        if tier:
            item.add_marker(tier)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_tiers(items)
    if not CURRENT_CLUSTER:
        return
    local_only = [item for item in items if item.get_closest_marker("any_cluster") is None]
    if local_only:
        config.hook.pytest_deselected(items=local_only)
        items[:] = [item for item in items if item.get_closest_marker("any_cluster")]
        print(
            f"\n[current] {len(local_only)} tests need this machine's node or kwok's: not run on the current cluster"
        )


TIER_ORDER = [Tier.A, Tier.B, Tier.C]


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[Cluster]:
    if CURRENT_CLUSTER:
        # Duck-typed as the local cluster where `any_cluster` tests use it (kubeconfig, kubectl, images).
        yield CurrentCluster.from_kubeconfig(registry=os.environ.get("DTJOB_REGISTRY") or None)
        return
    cluster = Cluster()
    was_running = cluster.running_tier() is not None
    yield cluster
    if not was_running and os.environ.get("DTJOB_KEEP_CLUSTER") != "1":
        cluster.down()


def _at_tier(cluster: Cluster, tier: Tier) -> Cluster:
    if CURRENT_CLUSTER:
        return cluster  # the user's cluster is up, and not ours to start
    running = cluster.running_tier()
    if running is None or TIER_ORDER.index(running) < TIER_ORDER.index(tier):
        cluster.up(tier)
    cluster.check_alive()
    return cluster


@pytest.fixture
def cluster_a(local_cluster: Cluster) -> Cluster:
    return _at_tier(local_cluster, Tier.A)


@pytest.fixture
def cluster_b(local_cluster: Cluster) -> Cluster:
    return _at_tier(local_cluster, Tier.B)


@pytest.fixture
def cluster_c(local_cluster: Cluster) -> Cluster:
    return _at_tier(local_cluster, Tier.C)


@pytest.fixture(scope="session")
def api_client(local_cluster: Cluster) -> client.ApiClient:
    # The kubeconfig exists once the control plane does: whatever tier the test asks for next, at least A.
    return config.new_client_from_config(config_file=str(_at_tier(local_cluster, Tier.A).kubeconfig))


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


def create_namespace(api: client.CoreV1Api, name: str, labels: dict[str, str] | None = None) -> None:
    """Create a namespace and wait for its default ServiceAccount: until the controller-manager has made
    it, every pod is refused ("serviceaccount default not found"), and after a control-plane restart or
    while it collects other namespaces that can take seconds."""
    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))
    wait_for(
        lambda: api.read_namespaced_service_account("default", name), f"sa/default in {name}", timeout=60
    )


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

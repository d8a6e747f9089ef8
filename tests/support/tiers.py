"""The cluster a test runs on: the local one brought up to the tier it needs, or (DTJOB_CLUSTER=current)
the kubeconfig's current one, as it is."""

from __future__ import annotations

import os

from localcluster import Cluster, Tier

CURRENT_CLUSTER = os.environ.get("DTJOB_CLUSTER") == "current"
TIER_ORDER = [Tier.A, Tier.B, Tier.C]


def _below(cluster: Cluster, tier: Tier) -> bool:
    running = cluster.running_tier()
    return running is None or TIER_ORDER.index(running) < TIER_ORDER.index(tier)


def at_tier(cluster: Cluster, tier: Tier) -> Cluster:
    if CURRENT_CLUSTER:
        return cluster  # the user's cluster is up, and not ours to start
    if _below(cluster, tier):
        cluster.up(tier)  # one at a time (Cluster.up locks): a second caller finds the first's components
    cluster.check_alive()
    return cluster

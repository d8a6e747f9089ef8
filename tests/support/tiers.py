"""The cluster a test runs on: the local one brought up to the tier it needs, or (DTJOB_CLUSTER=current)
the kubeconfig's current one, as it is."""

from __future__ import annotations

import os

from localcluster import Cluster, Tier

CURRENT_CLUSTER = os.environ.get("DTJOB_CLUSTER") == "current"
TIER_ORDER = [Tier.A, Tier.B, Tier.C]


def at_tier(cluster: Cluster, tier: Tier) -> Cluster:
    if CURRENT_CLUSTER:
        return cluster  # the user's cluster is up, and not ours to start
    running = cluster.running_tier()
    if running is None or TIER_ORDER.index(running) < TIER_ORDER.index(tier):
        cluster.up(tier)
    cluster.check_alive()
    return cluster

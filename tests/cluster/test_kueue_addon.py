"""`localcluster up --addons kueue`: the real Kueue on tier B, its webhooks registered by URL (only for
Kueue's own kinds) and answering, and `down_kueue` taking them away again."""

from __future__ import annotations

import json
import re

import pytest

from localcluster import Cluster, ClusterError, Tier, kueue
from tests.support.tiers import at_tier

# Starts and stops Kueue: one test at a time with the Kueue module, never beside it.
pytestmark = pytest.mark.kueue

BAD_FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
              "metadata": {"name": "bad-flavor"}, "spec": {"nodeLabels": {"bad key!": "x"}}}  # fmt: skip


def registrations(cluster: Cluster) -> list[dict]:
    found = []
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        listed = json.loads(cluster.kubectl("get", kind, "-o", "json"))["items"]
        found += [c for c in listed if c["metadata"]["name"].startswith("kueue-")]
    return found


@pytest.mark.tier_b
def test_kueue_runs_with_its_webhooks_served_by_url_and_refusing_a_bad_object(local_cluster: Cluster) -> None:
    cluster = at_tier(local_cluster, Tier.B)
    cluster.up_kueue()
    try:
        hooks = [hook for config in registrations(cluster) for hook in config["webhooks"]]
        assert hooks, "no Kueue webhook registered"
        for hook in hooks:
            assert hook["clientConfig"]["url"].startswith(f"https://127.0.0.1:{kueue.WEBHOOK_PORT}/")
            assert {g for rule in hook["rules"] for g in rule["apiGroups"]} == {"kueue.x-k8s.io"}, hook[
                "name"
            ]
        with pytest.raises(ClusterError, match=re.escape('admission webhook "vresourceflavor.kb.io" denied')):
            cluster.kubectl("apply", "-f", "-", input=json.dumps(BAD_FLAVOR))
    finally:
        cluster.down_kueue()
    assert registrations(cluster) == []
    assert not cluster.procs.running("kueue")


def test_an_addon_needs_tier_b_and_an_unknown_one_is_named(local_cluster: Cluster) -> None:
    with pytest.raises(ClusterError, match="addons run on tier B or C, not A"):
        local_cluster.up(Tier.A, addons=("kueue",))
    with pytest.raises(ClusterError, match=r"unknown addon\(s\) volcano; there are: kueue"):
        local_cluster.up(Tier.B, addons=("volcano",))

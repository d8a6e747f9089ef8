"""The fake fleet's heartbeat, as stated in localcluster: kwok keeps each node alive by its Lease and writes
its status rarely, and the node controller's grace period stands above the renewal, so that a loaded machine
never turns a fake node NotReady by being late."""

from __future__ import annotations

import yaml

from localcluster import controlplane, fakenodes
from localcluster.layout import HERE


def node_stages() -> dict[str, dict]:
    stages = yaml.safe_load_all((HERE / "kwok-stages.yaml").read_text())
    return {s["metadata"]["name"]: s["spec"] for s in stages if s["spec"]["resourceRef"]["kind"] == "Node"}


def test_the_node_stages_are_stated_and_the_heartbeat_is_the_lease_kind_every_ten_minutes() -> None:
    # kwok v0.7.0 takes its lease-less default (a status PATCH every 20-25 s a node) when none is stated.
    stages = node_stages()
    assert set(stages) == {"node-initialize", "node-heartbeat-with-lease"}
    assert stages["node-heartbeat-with-lease"]["delay"]["durationMilliseconds"] >= 600_000


def test_the_node_controller_waits_three_renewals_before_it_takes_a_fake_node_for_lost() -> None:
    renewal = fakenodes.LEASE_SECONDS / 4  # kwok's, as a kubelet's
    assert controlplane.NODE_MONITOR_GRACE.endswith("s")
    assert int(controlplane.NODE_MONITOR_GRACE[:-1]) >= 3 * renewal

"""runPolicy.slowRankRestartSeconds against the real apiserver and scheduler (tier B): a rank whose
reports say it is slow, for long enough, moves the gang off its node. Reports are posted as a trainer
posts them, with pod-bound tokens (the trainers' side, with real training, is tests/e2e/test_progress.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from dtjob.core.names import ATTEMPT_LABEL
from localcluster import Cluster
from tests.support.http import post
from tests.support.jobs import Jobs, pytorch_job
from tests.support.operator import operator_taking_reports
from tests.support.reads import wait_event
from tests.support.service_accounts import token
from tests.support.waiting import wait_for

AFTER = 60  # the least slowRankRestartSeconds takes


def test_a_rank_slow_for_long_enough_moves_the_gang_off_its_node(
    cluster_b: Cluster, crd: dict[str, Any], jobs: Jobs, core: client.CoreV1Api, namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    with operator_taking_reports(cluster_b, namespace, monkeypatch) as (_, url):
        jobs.create(pytorch_job("slow", workers=2, runPolicy={"slowRankRestartSeconds": AFTER}))
        first = {p.metadata.name: p.spec.node_name for p in jobs.wait_pods("slow", 2, phase="Running")}
        slow_node = first["slow-worker-1"]
        for pod, own in (("slow-worker-0", 0.004), ("slow-worker-1", 0.05)):
            report = {"step": 10, "ownStepSeconds": own, "stepSeconds": 0.05}
            assert post(url, report, token(core, namespace, pod))[0] == 204
        found = jobs.wait_condition("slow", "SlowRank")
        assert found["message"].startswith(f"pod slow-worker-1 on node {slow_node} "), found
        restart = wait_for(
            lambda: jobs.get("slow")["status"].get("lastRestart"), "the slow-rank restart", AFTER + 30
        )
        status = jobs.get("slow")["status"]
        assert restart["reason"] == "SlowRank" and f"without node {slow_node}" in restart["message"], restart
        assert status["restarts"] == {"failures": 0, "preemptions": 0, "slowRanks": 1, "total": 1}, status
        assert status["avoidedNodes"] == [slow_node]
        wait_event(core, namespace, "slow", "SlowRank", contains="stayed slow")

        # The next attempt's pods run, none of them on the slow node: the real scheduler kept them off.
        def moved() -> list[client.V1Pod] | None:
            pods = [p for p in jobs.pods("slow") if p.metadata.labels.get(ATTEMPT_LABEL) == "2"]
            return pods if len(pods) == 2 and all(p.status.phase == "Running" for p in pods) else None

        pods = wait_for(moved, "attempt 2 running", 120)
        assert all(p.spec.node_name != slow_node for p in pods), [
            (p.metadata.name, p.spec.node_name) for p in pods
        ]

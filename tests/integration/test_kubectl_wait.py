"""Each `kubectl wait` that docs/gitops.md and the README give, run by the cluster's kubectl against the
captured jobs (tests/data/gitops) stored in a real apiserver: what it says of each state is what the docs'
table says. Tier A: `kubectl wait --local -f FILE` still asks a server for the object (kubectl v1.34.4
panics without one)."""

from __future__ import annotations

import re
import subprocess
from typing import Any

from localcluster import Cluster
from tests.support.builders import merged
from tests.support.gitops_states import BEFORE_CHANGE, USER_CHANGE, read
from tests.support.gitops_table import DOCS, MET, WAITS, documented_waits, health_table, wait_columns
from tests.support.jobs import GROUP, PLURAL, VERSION, Jobs
from tests.support.paths import REPO

# How kubectl wait (v1.34) says that an object met the condition or, at --timeout=0s, did not.
_MET = re.compile(r"^distributedtrainingjob\.training\.dtjob\.io/(\S+) condition met$", re.MULTILINE)
_NOT_MET = re.compile(r"^condition not met for distributedtrainingjobs/(\S+)$", re.MULTILINE)


def _store(jobs: Jobs, job: dict[str, Any]) -> None:
    """The job as the apiserver would hold it: created, its status written by the operator; a job whose
    generation is 2 was created before the user's change (USER_CHANGE), which came after (spec-changed)
    or before (suspended) the status the operator wrote."""
    name, changed = job["metadata"]["name"], job["metadata"]["generation"] > 1
    metadata = {"name": name, "labels": job["metadata"].get("labels", {})}
    body = {"apiVersion": job["apiVersion"], "kind": job["kind"], "metadata": metadata, "spec": job["spec"]}
    jobs.create(merged(body, BEFORE_CHANGE) if changed else body)
    if "status" in job:
        jobs.api.patch_namespaced_custom_object_status(
            GROUP, VERSION, jobs.namespace, PLURAL, name, {"status": job["status"]}
        )
    if changed:
        jobs.patch(name, USER_CHANGE)
    stored = jobs.get(name)
    assert stored["metadata"]["generation"] == job["metadata"]["generation"], name
    assert stored.get("status") == job.get("status"), name  # the CRD's schema kept every field


def _wait(cluster: Cluster, namespace: str, flag: str, names: list[str]) -> dict[str, str]:
    """What `kubectl wait FLAG` says of each job at once (--timeout=0s: each is looked at once, and either
    meets the condition or does not; anything else fails the test)."""
    command = [str(cluster.layout.kubectl), "--kubeconfig", str(cluster.kubeconfig), "-n", namespace, "wait",
               flag, "--timeout=0s", *(f"dtj/{name}" for name in names)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    said = {name: MET for name in _MET.findall(done.stdout)} | {
        name: WAITS for name in _NOT_MET.findall(done.stderr)
    }
    assert sorted(said) == sorted(names), done.stdout + done.stderr
    return said


def test_each_documented_kubectl_wait_says_what_the_docs_table_says(
    cluster_a: Cluster, crd: dict[str, Any], jobs: Jobs, namespace: str
) -> None:
    rows = health_table()
    flags = sorted(wait_columns(rows[0]))
    assert documented_waits(DOCS, REPO / "README.md") <= set(flags), "a documented kubectl wait has no column"
    for row in rows:
        _store(jobs, read(row.state))  # each job is named after its state
    for flag in flags:
        said = _wait(cluster_a, namespace, flag, [row.state for row in rows])
        for row in rows:
            assert said[row.state] == wait_columns(row)[flag], (
                f"{row.state}: kubectl wait {flag}: {said[row.state]}; docs/gitops.md's table says {wait_columns(row)[flag]}"
            )

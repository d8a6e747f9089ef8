"""The console against the real apiserver with no operator running (its views only read): kubectl's
kubeconfig conventions (--kubeconfig, KUBECONFIG, --context, the context's namespace, -n, -A) and its
errors, one line each. tests/e2e/test_console.py has it with a job that trains and restarts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from localcluster import Cluster
from tests.support.jobs import Jobs, pytorch_job


def dtjob(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in {**os.environ, **env}.items() if v}
    return subprocess.run(
        [sys.executable, "-m", "dtjob.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
    )


def kubeconfig_with_namespaces(cluster: Cluster, path: Path, namespace: str) -> Path:
    """The cluster's kubeconfig with its context's namespace set, and a second context 'elsewhere'."""
    config: dict[str, Any] = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    home = config["contexts"][0]
    home["context"]["namespace"] = namespace
    config["contexts"].append({"name": "elsewhere", "context": {**home["context"], "namespace": "nowhere"}})
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_views_read_jobs_with_no_operator_and_choose_namespaces_as_kubectl_does(
    cluster_b: Cluster, crd: dict[str, Any], jobs: Jobs, namespace: str, tmp_path: Path
) -> None:
    jobs.create(pytorch_job("quiet"))

    listed = dtjob("get", "-n", namespace)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[:7] == ["quiet", "Pending", "-", "1", "0", "-", "-"], (
        listed.stdout
    )
    everywhere = dtjob("get", "-A")
    assert any(line.split()[:2] == [namespace, "quiet"] for line in everywhere.stdout.splitlines()), (
        everywhere
    )

    kubeconfig = kubeconfig_with_namespaces(cluster_b, tmp_path / "kubeconfig", namespace)
    from_context = dtjob("get", KUBECONFIG=str(kubeconfig))
    assert "quiet" in from_context.stdout, from_context
    flag = dtjob("get", "--kubeconfig", str(kubeconfig), KUBECONFIG="")
    assert "quiet" in flag.stdout, flag
    other = dtjob("get", "--context", "elsewhere", KUBECONFIG=str(kubeconfig))
    assert (
        other.returncode == 0 and other.stdout.strip() == 'No DistributedTrainingJobs in namespace "nowhere".'
    )

    described = dtjob("describe", "quiet", KUBECONFIG=str(kubeconfig))
    assert described.returncode == 0, described.stderr
    assert "Phase      Pending" in described.stdout and "Pods\nnone" in described.stdout, described.stdout

    no_pods = dtjob("logs", "quiet", "-n", namespace)
    assert (no_pods.returncode, no_pods.stderr.strip()) == (
        1,
        "no pods of quiet in attempt 1: none exists yet",
    )


def test_each_failure_is_one_line_that_says_what_is_wrong(
    cluster_b: Cluster, crd: dict[str, Any], namespace: str, tmp_path: Path
) -> None:
    missing = dtjob("describe", "missing", "-n", namespace)
    assert (missing.returncode, missing.stderr.strip()) == (
        1, f'Error: distributedtrainingjob "missing" not found in namespace "{namespace}" (context "local")'
    ), missing  # fmt: skip
    no_context = dtjob("get", "--context", "nope")
    assert no_context.returncode == 1 and no_context.stderr.startswith("Error: kubeconfig:"), no_context
    assert "nope" in no_context.stderr
    unreachable = tmp_path / "unreachable"
    config: dict[str, Any] = yaml.safe_load(Path(cluster_b.kubeconfig).read_text())
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"  # nothing listens on the discard port
    unreachable.write_text(yaml.safe_dump(config))
    down = dtjob("get", "--kubeconfig", str(unreachable))
    assert down.returncode == 1 and down.stderr.startswith("Error: cannot reach the apiserver"), down
    assert len(down.stderr.strip().splitlines()) == 1, down.stderr


def test_a_job_deleted_while_watched_ends_the_watch_with_a_line_saying_so(
    cluster_b: Cluster, crd: dict[str, Any], jobs: Jobs, namespace: str
) -> None:
    """Without a terminal, `watch` prints its lines plainly; it ends (exit 1) once the job is gone."""
    jobs.create(pytorch_job("fleeting"))
    watching = subprocess.Popen([sys.executable, "-m", "dtjob.cli", "watch", "fleeting", "-n", namespace],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert watching.stdout is not None
        first = watching.stdout.readline()  # the job as the watch first saw it: it is watching now
        assert first.split(" ", 1)[1].strip() == "Pending, attempt 1", first
        jobs.delete("fleeting")
        out, err = watching.communicate(timeout=60)
        assert (watching.returncode, err.strip()) == (1, "fleeting was deleted"), (out, err)
    finally:
        watching.kill()

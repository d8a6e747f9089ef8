"""Generated manifests, valid and mutated, sent to the real API server with the operator running.

Each one ends one of three ways, and only these: the API server rejects it with a message that names
the field; the operator marks it Invalid with a message that names the field; or it runs (the operator
takes it: a status with a phase, and pods unless it is suspended). The operator never crashes nor loops
on errors (`running_operator` fails the test on any traceback in its log). The counts are printed.

The manifests are the same 100 in every run (derandomized, as Hypothesis is by default on CI): what the
gate runs does not change from one run to the next. Numbers are small or past the CRD's bounds, never a
large gang the CRD accepts: a drawn TensorFlow job of 2,956 Workers (every pod's TF_CONFIG and
CLUSTER_SPEC listing every task, 82-425 KB a pod) wrote 620 MB of pods to etcd in three minutes, then
1.25 GB more in the net's rerun (etcd's database at 1,717 MiB); in another run it filled the 2 GiB
quota, failing the 70 tests after it (2026-12-03).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from collections import Counter
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kopf.testing import KopfRunner
from kubernetes import client

from tests.support.jobs import Jobs, pytorch_job
from tests.support.paths import CRD_FILE
from tests.support.waiting import wait_for

# Where a mutation lands, and what it may put there: wrong types, out-of-range numbers, unknown names.
# The bounds the CRD states (a replica count's 10000, a port's 65535) are met from outside only.
ODD_VALUES = st.one_of(
    st.sampled_from([None, "", "x", -1, 0, 1, 2, 7, 9, 16, 10001, 10**9, True, 1.5, [], {}, "/a", [1]]),
    st.sampled_from(
        [
            "PyTorch",
            "Worker",
            "Chief",
            "PS",
            "Evaluator",
            "ExitCode",
            "GPUDirectTCPXO",
            "RDMA",
            "nvidia-l4",
            [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "bogus"}}}],
        ]
    ),
    st.text(max_size=8),
    st.integers(-5, 20),
    st.sampled_from([65535, 65536, 70000]),
)
# The largest replica count ODD_VALUES gives that the CRD accepts: a generated job has at most 23 pods.
MOST_COUNT = 20
PATHS = [
    ("spec", "framework"),
    ("spec", "replicas", 0, "role"),
    ("spec", "replicas", 0, "count"),
    ("spec", "replicas", 0, "template", "spec", "containers"),
    ("spec", "replicas", 0, "template", "spec", "containers", 0, "image"),
    ("spec", "replicas", 0, "template", "spec", "containers", 0, "name"),
    ("spec", "replicas", 0, "template", "spec", "volumes"),
    ("spec", "replicas", 0, "template", "metadata", "labels"),
    ("spec", "replicas", 0, "template", "spec", "containers", 0, "env"),
    ("spec", "accelerator", "type"),
    ("spec", "accelerator", "count"),
    ("spec", "accelerator", "placementGroup"),
    ("spec", "nccl", "profile"),
    ("spec", "nccl", "env"),
    ("spec", "nccl", "preflight", "enabled"),
    ("spec", "checkpoint", "path"),
    ("spec", "checkpoint", "volume"),
    ("spec", "runPolicy", "backoffLimit"),
    ("spec", "runPolicy", "restartPolicy"),
    ("spec", "runPolicy", "suspend"),
    ("spec", "runPolicy", "activeDeadlineSeconds"),
    ("spec", "runPolicy", "failureSettleSeconds"),
    ("spec", "torch", "nprocPerNode"),
    ("spec", "tensorflow"),
    ("spec", "unknownField"),
]


def names_a_mutated_field(message: str, mutated: list[tuple[str | int, ...]]) -> bool:
    """Whether the message names a field a mutation set (its own name, as `spec.x.y` or `y` ends it)."""
    names = {str(next(step for step in reversed(path) if isinstance(step, str))) for path in mutated}
    return any(re.search(rf"\b{re.escape(name)}\b", message) for name in names)


@st.composite
def manifests(draw: st.DrawFn, index: int) -> tuple[dict[str, Any], list[tuple[str | int, ...]]]:
    """A valid job of a drawn shape, then up to three mutations (zero: the valid job itself)."""
    job = pytorch_job(f"fuzz-{index}", workers=draw(st.integers(1, 3)), master=draw(st.booleans()))
    if draw(st.booleans()):
        job["spec"]["framework"] = "TensorFlow"
        for replica in job["spec"]["replicas"]:
            replica["role"] = {"Master": "Chief"}.get(replica["role"], replica["role"])
    mutations = []
    for _ in range(draw(st.integers(0, 3))):
        path, value = draw(st.sampled_from(PATHS)), draw(ODD_VALUES)
        if _set(job, path, value):
            mutations.append(path)
    return job, mutations


def _set(obj: Any, path: tuple[str | int, ...], value: Any) -> bool:
    for step in path[:-1]:
        try:
            obj = obj.setdefault(step, {}) if isinstance(obj, dict) else obj[step]
        except (IndexError, KeyError, TypeError):
            return False
        if not isinstance(obj, dict | list):
            return False
    if isinstance(obj, list) and not isinstance(path[-1], int):
        return False
    try:
        obj[path[-1]] = value
    except (IndexError, TypeError):
        return False
    return True


@cache
def crd_count_bounds() -> tuple[int, int]:
    spec = yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    count = spec["properties"]["spec"]["properties"]["replicas"]["items"]["properties"]["count"]
    return count["minimum"], count["maximum"]


@settings(max_examples=500, deadline=None)
@given(value=ODD_VALUES)
def test_no_odd_value_is_a_replica_count_the_crd_accepts_for_a_large_gang(value: Any) -> None:
    least, most = crd_count_bounds()
    accepted = type(value) is int and least <= value <= most
    assert not accepted or value <= MOST_COUNT


@pytest.fixture(scope="module")
def serial() -> Iterator[int]:
    """Each drawn job's own name, also when Hypothesis replays one that failed: the job it left may
    still be there."""
    return itertools.count()


@pytest.fixture(scope="module")
def outcomes() -> Iterator[Counter[str]]:
    counts: Counter[str] = Counter()
    yield counts
    print(f"\nfuzzed manifests: {dict(counts)}")


def outcome(jobs: Jobs, name: str, suspended: bool) -> tuple[str, str]:
    """("invalid", message) or ("runs", phase), once the operator has said."""

    def said() -> tuple[str, str] | None:
        status = jobs.get(name).get("status") or {}
        phase = status.get("phase")
        if phase == "Invalid":
            condition = next(c for c in status["conditions"] if c["type"] == "Invalid")
            return "invalid", condition["message"]
        # Its pods seen, or recorded as created: a deadline of a second may take them before a poll sees
        # them (on a busy machine the job was Failed, its pods gone, at the first look).
        if phase and (suspended or jobs.pods(name) or status.get("createdAttempt")):
            return "runs", phase
        return None

    return wait_for(said, f"the operator's word on {name}", timeout=30)


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_generated_manifest_is_rejected_invalid_or_running_never_a_crash(
    operator: KopfRunner, jobs: Jobs, outcomes: Counter[str], serial: Iterator[int], data: st.DataObject
) -> None:
    job, mutations = data.draw(manifests(next(serial)), label="manifest")
    try:
        jobs.create(copy.deepcopy(job))
    except client.ApiException as err:
        assert err.status in (400, 422), (err.status, err.body)
        message = json.loads(err.body)["message"]
        assert names_a_mutated_field(message, mutations), (
            f"{job['spec']}: the rejection names no mutated field: {message}"
        )
        outcomes["rejected by the API server"] += 1
        return
    try:
        suspended = (job["spec"].get("runPolicy") or {}).get("suspend") is True
        kind, said = outcome(jobs, job["metadata"]["name"], suspended)
        if kind == "invalid":
            assert names_a_mutated_field(said, mutations), (
                f"{job['spec']}: Invalid names no mutated field: {said}"
            )
            outcomes["Invalid, naming the field"] += 1
        else:
            outcomes[f"ran ({'suspended' if suspended else 'pods created'})"] += 1
    finally:
        jobs.delete(job["metadata"]["name"])
